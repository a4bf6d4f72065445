"""Two communicators and a group, for the matching test: the world communicator is split by the
parity of the rank; each step runs one group of two all-reduces on the world communicator (one
collective operation) and one all-reduce on the rank's half."""
import ctypes

from sim import NCCL_FLOAT32, NCCL_SUM, check, cuda, world_communicator
STEPS = 5


def all_reduce(buffer, count, comm, stream):
    check(cuda.ncclAllReduce(buffer, buffer, ctypes.c_size_t(count), NCCL_FLOAT32, NCCL_SUM, comm, stream),
          "all-reduce")


def main():
    stream, buffer = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(buffer), 4096), "cudaMalloc")
    half = ctypes.c_void_p()
    rank, comm = world_communicator()
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
