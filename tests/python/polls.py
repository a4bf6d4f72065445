"""A polling loop: cudaStreamQuery until the stream is idle, as `while not stream.query():` does.

Each query asks and returns at once: the report lists the loop under polls with its rate, never as
a synchronisation, and the shim takes its stacks only now and then. cudaFree(NULL), PyTorch's way of
creating the context, is no synchronisation either.
"""
import ctypes

import sim

POLLS = 1000


def wait_for(stream):
    for _ in range(POLLS):
        sim.cuda.cudaStreamQuery(stream)  # PLANT poll


def main():
    stream = ctypes.c_void_p()
    sim.check(sim.cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    sim.check(sim.cuda.cudaFree(None), "cudaFree")  # PLANT context
    wait_for(stream)
    sim.check(sim.cuda.cudaStreamSynchronize(stream), "cudaStreamSynchronize")  # PLANT sync


if __name__ == "__main__":
    main()
