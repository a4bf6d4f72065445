"""A job that hangs: at step 3 rank 1 goes off to evaluate and never enters the all-reduce the
other ranks are waiting in (for the hang test; the test kills it)."""
import ctypes
import os
import sys
import time

ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)
NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: {rc}")


def evaluate(stream):
    check(cuda.cudaStreamSynchronize(stream), "evaluate")  # PLANTED last_activity
    time.sleep(3600)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    stream, grads = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(grads), 4096), "cudaMalloc")
    unique_id, comm = UniqueId(), ctypes.c_void_p()
    check(cuda.ncclGetUniqueId(ctypes.byref(unique_id)), "ncclGetUniqueId")
    check(cuda.ncclCommInitRank(ctypes.byref(comm), world, unique_id, rank), "ncclCommInitRank")
    for step in range(10):
        if step == 3 and rank == 1:
            evaluate(stream)
        check(cuda.ncclAllReduce(grads, grads, ctypes.c_size_t(1024), NCCL_FLOAT32, NCCL_SUM, comm, stream),
              "all-reduce")
        check(cuda.cudaStreamSynchronize(stream), "step end")


if __name__ == "__main__":
    main()
