"""Live stacks for `trainshim dump`: two ranks make some CUDA calls, then rank 0's main thread
spins in pure Python holding the GIL (it never releases it: no thread waits for it), and rank 1
sleeps in a loop. The test kills the job.
"""
import ctypes
import time

from host_plant import ready
from sim import H2D, check, cuda, world_communicator


def spin():
    x = 0
    # One line: CPython charges the loop's backward jump to the `while` line, so a two-line loop
    # is sampled at either line.
    while True: x += 1  # PLANTED spin


def idle():
    while True:
        time.sleep(0.2)  # PLANTED idle


def main():
    stream, device = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(device), 4096), "cudaMalloc")
    rank, comm = world_communicator()
    host = ctypes.create_string_buffer(4096)
    for _ in range(3):
        check(cuda.cudaMemcpy(device, host, ctypes.c_size_t(4096), H2D), "cudaMemcpy")
        check(cuda.cudaStreamSynchronize(stream), "cudaStreamSynchronize")
    ready(rank)
    if rank == 0:
        spin()
    idle()


if __name__ == "__main__":
    main()
