"""A job that hangs: at step 3 rank 1 (HANG_RANK) goes off to evaluate and never enters the
all-reduce the other ranks are waiting in (for the hang test; the test kills it)."""
import ctypes
import os
import time

from sim import NCCL_FLOAT32, NCCL_SUM, check, cuda, world_communicator


def evaluate(stream):
    check(cuda.cudaStreamSynchronize(stream), "evaluate")  # PLANTED last_activity
    time.sleep(3600)


def main():
    stream, grads = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(grads), 4096), "cudaMalloc")
    rank, comm = world_communicator()
    hung = int(os.environ.get("HANG_RANK", "1"))
    for step in range(10):
        if step == 3 and rank == hung:
            evaluate(stream)
        check(cuda.ncclAllReduce(grads, grads, ctypes.c_size_t(1024), NCCL_FLOAT32, NCCL_SUM, comm, stream),
              "all-reduce")
        check(cuda.cudaStreamSynchronize(stream), "step end")


if __name__ == "__main__":
    main()
