"""A hang on a communicator's first collective, for the hang test: two ranks create their
communicator; rank 0 enters the first all-reduce at once, rank 1 goes off to load a checkpoint
that never arrives and never enters it. The test kills the job.
"""
import ctypes
import time

from host_plant import ready
from sim import all_reduce, check, cuda, world_communicator


def load_checkpoint(rank):
    ready(rank)
    while True:
        time.sleep(0.5)  # PLANTED waiting_for_checkpoint


def main():
    stream, grads = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(grads), 4096), "cudaMalloc")
    rank, comm = world_communicator()
    if rank == 1:
        load_checkpoint(rank)
    ready(rank)
    all_reduce(comm, grads, 1024, stream)
    check(cuda.cudaStreamSynchronize(stream), "step end")


if __name__ == "__main__":
    main()
