"""A data-parallel loop with a straggler, for the collective-wait test.

Every step: 2 ms of GPU work, then three all-reduces (gradient buckets of three sizes). Rank 2
also loads its data slowly: STRAGGLER_DELAY_MS of host work before the first all-reduce, ending in
pageable copies at a known line. With STRAGGLER_DELAY_MS=0 every rank does the same.
"""
import ctypes
import os
import time

from sim import H2D, NCCL_FLOAT32, NCCL_SUM, check, cuda, world_communicator

STEPS = int(os.environ.get("STRAGGLER_STEPS", "10"))
DELAY_MS = float(os.environ.get("STRAGGLER_DELAY_MS", "30"))
SLOW_RANK = 2
BUCKETS = (4096, 2048, 1024)


def slow_data_loading(batch, device):
    for _ in range(3):
        time.sleep(DELAY_MS / 3000)
        check(cuda.cudaMemcpy(device, batch, ctypes.c_size_t(4096), H2D), "copy")  # PLANTED late_work


def main():
    stream, device, grads = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(device), 1 << 16), "cudaMalloc")
    check(cuda.cudaMalloc(ctypes.byref(grads), 4 * BUCKETS[0]), "cudaMalloc")
    rank, comm = world_communicator()
    batch = ctypes.create_string_buffer(4096)
    for _ in range(STEPS):
        check(cuda.simcudaBusy(stream, ctypes.c_uint(2000)), "forward/backward")
        if rank == SLOW_RANK and DELAY_MS > 0:
            slow_data_loading(batch, device)
        for bucket in BUCKETS:
            check(cuda.ncclAllReduce(grads, grads, ctypes.c_size_t(bucket), NCCL_FLOAT32, NCCL_SUM, comm, stream),
                  "all-reduce")
        check(cuda.cudaStreamSynchronize(stream), "step end")
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")


if __name__ == "__main__":
    main()
