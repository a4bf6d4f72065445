"""Times the sampler thread over a window (see scripts/bench/sampler)."""
import ctypes
import os
import sys
import threading
import time

DEPTH = 40
hz, seconds = int(sys.argv[1]), float(sys.argv[2])
THREADS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
# "poll": the threads wake every 10 ms (a loop that polls); "block": they wait on an event until
# the end (a DataLoader's pin-memory thread, autograd's workers), the main thread still polling.
WAITING = sys.argv[4] if len(sys.argv) > 4 else "poll"
ctypes.CDLL("libcudart.so.13", mode=os.RTLD_GLOBAL)
cuda = ctypes.CDLL(None)
stop = threading.Event()


def at_depth(levels, poll=True):
    if levels > 0:
        return at_depth(levels - 1, poll)
    if cuda.cudaDeviceSynchronize() != 0:
        sys.exit("cudaDeviceSynchronize failed")
    while not stop.is_set():
        if poll:
            time.sleep(0.01)
        else:
            stop.wait()


def frames_here():
    # This module's frame, the thread's own frames and at_depth's recursion make DEPTH frames.
    return DEPTH - 2


def sampler_cpu_ns():
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() == "trainshim-samp":
                    with open(f"/proc/self/task/{tid}/schedstat") as s:
                        return int(s.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just exited
            continue
    sys.exit("no sampler thread")


workers = [threading.Thread(target=at_depth, args=(frames_here() - 3, WAITING == "poll")) for _ in range(THREADS - 1)]
for w in workers:
    w.start()
time.sleep(1)  # warm up: the stacks are published, the files opened
start_cpu, start = sampler_cpu_ns(), time.monotonic()
stop_timer = threading.Timer(seconds, stop.set)
stop_timer.start()
at_depth(frames_here())
cpu, elapsed = sampler_cpu_ns() - start_cpu, time.monotonic() - start
for w in workers:
    w.join()
ticks = elapsed * hz  # intervals average the period (jitter is symmetric)
print(f"{hz} Hz, {THREADS} threads ({WAITING}) at {DEPTH} Python frames, {elapsed:.1f} s: sampler CPU {cpu / 1e6:.1f} ms = "
      f"{100 * cpu / (elapsed * 1e9):.3f} % of one core, {cpu / ticks / 1e3:.1f} us per tick, "
      f"{cpu / ticks / THREADS / 1e3:.1f} us per thread sample")
