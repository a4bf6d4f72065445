"""Two communicators and a group, for the matching test: the world communicator is split by the
parity of the rank; each step runs one group of two all-reduces on the world communicator (one
collective operation) and one all-reduce on the rank's half."""
import ctypes
import os
import sys

ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)
NCCL_FLOAT32, NCCL_SUM = 7, 0
STEPS = 5


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def check(rc, what):
    if rc != 0:
        sys.exit(f"{what} failed: {rc}")


def all_reduce(buffer, count, comm, stream):
    check(cuda.ncclAllReduce(buffer, buffer, ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comm, stream),
          "all-reduce")


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    stream, buffer = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(buffer), 4096), "cudaMalloc")
    unique_id, comm, half = UniqueId(), ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.ncclGetUniqueId(ctypes.byref(unique_id)), "ncclGetUniqueId")
    check(cuda.ncclCommInitRank(ctypes.byref(comm), world, unique_id, rank), "ncclCommInitRank")
    check(cuda.ncclCommSplit(comm, rank % 2, rank, ctypes.byref(half), None), "ncclCommSplit")
    for _ in range(STEPS):
        check(cuda.ncclGroupStart(), "ncclGroupStart")
        all_reduce(buffer, 256, comm, stream)
        all_reduce(buffer, 128, comm, stream)
        check(cuda.ncclGroupEnd(), "ncclGroupEnd")
        all_reduce(buffer, 64, half, stream)
        check(cuda.cudaStreamSynchronize(stream), "step end")
    check(cuda.ncclCommDestroy(half), "ncclCommDestroy")
    check(cuda.ncclCommDestroy(comm), "ncclCommDestroy")


if __name__ == "__main__":
    main()
