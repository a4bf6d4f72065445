"""Run by tests/programs/embedded_python.cpp in the interpreter it embeds and then unloads: 20
recorded copies, 5 ms apart, from a function two frames deep (tests/integration/test_sampler.cpp)."""
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim  # noqa: E402


def copies(count):
    device = ctypes.c_void_p()
    sim.check(sim.cuda.cudaMalloc(ctypes.byref(device), ctypes.c_size_t(64)), "cudaMalloc")
    host = ctypes.create_string_buffer(64)
    for _ in range(count):
        sim.check(sim.cuda.cudaMemcpy(device, host, ctypes.c_size_t(64), sim.H2D), "cudaMemcpy")  # COPY embedded
        time.sleep(0.005)


def main():
    copies(20)


main()
