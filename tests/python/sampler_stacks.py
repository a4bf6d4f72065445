"""The sampler's view of two Python threads (tests/integration/test_sampler.cpp): the main thread
waits in main_waits, a second thread that made a CUDA call waits in worker_waits; each line the
samples must name is marked. Prints the second thread's kernel id."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sim  # noqa: E402


def worker_waits(ready, done, native):
    sim.check(sim.cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    native.append(threading.get_native_id())
    ready.set()
    done.wait()  # SAMPLED worker


def main_waits(seconds):
    time.sleep(seconds)  # SAMPLED main


def main():
    sim.check(sim.cuda.cudaDeviceSynchronize(), "cudaDeviceSynchronize")
    ready, done, native = threading.Event(), threading.Event(), []
    worker = threading.Thread(target=worker_waits, args=(ready, done, native))
    worker.start()
    ready.wait()
    main_waits(float(sys.argv[1]))
    done.set()
    worker.join()
    print("worker", native[0])


main()
