"""Threads that come and go while the sampler reads them (tests/integration/test_sampler.cpp; round
2's pyfinal and pysampler churn):
  sampler_lifecycle.py finalize   8 daemon threads copy in a loop 30 frames deep while the main
                                  thread returns at once: the interpreter finalizes under them
  sampler_lifecycle.py churn S    batches of 16 threads, each making one copy, started and joined
                                  for S seconds; prints "copies N" (the main thread's one included)
"""
import ctypes
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim  # noqa: E402

DEVICE = ctypes.c_void_p()
sim.check(sim.cuda.cudaMalloc(ctypes.byref(DEVICE), ctypes.c_size_t(64)), "cudaMalloc")
HOST = ctypes.create_string_buffer(64)


def copy():
    sim.check(sim.cuda.cudaMemcpy(DEVICE, HOST, ctypes.c_size_t(64), sim.H2D), "cudaMemcpy")


def copy_forever(levels):
    if levels:
        return copy_forever(levels - 1)
    while True:
        copy()


def main():
    copy()
    if sys.argv[1] == "finalize":
        for _ in range(8):
            threading.Thread(target=copy_forever, args=(30,), daemon=True).start()
        time.sleep(0.05 + (os.getpid() % 7) * 0.01)  # finalization comes at varied points of the loops
        return
    copies = 1
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        batch = [threading.Thread(target=copy) for _ in range(16)]
        for thread in batch:
            thread.start()
        for thread in batch:
            thread.join()
        copies += len(batch)
    print("copies", copies)


main()
