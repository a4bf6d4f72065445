"""A straggler whose late time is pure host work: two ranks, rank 1 sleeps 40 ms each step in
load_shard (no CUDA call between its last sync and the all-reduce the other rank waits in), for
the sampler's "what the straggler was doing" test.

Each step: 2 ms of GPU work, rank 1's load_shard, one all-reduce, a stream sync.
"""
import ctypes
import os
import time

from sim import all_reduce, check, cuda, world_communicator

STEPS = int(os.environ.get("HOST_STEPS", "20"))
SLEEP_S = 0.040
SLOW_RANK = 1


def load_shard():
    time.sleep(SLEEP_S)  # PLANTED sleep


def main():
    stream, grads = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(grads), 4096), "cudaMalloc")
    rank, comm = world_communicator()
    for _ in range(STEPS):
        check(cuda.simcudaBusy(stream, ctypes.c_uint(2000)), "forward/backward")
        if rank == SLOW_RANK:
            load_shard()
        all_reduce(comm, grads, 1024, stream)
        check(cuda.cudaStreamSynchronize(stream), "step end")
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")


if __name__ == "__main__":
    main()
