"""Times sync events with stack capture at a realistic depth (see scripts/bench/sync-stacks)."""
import ctypes
import statistics
import sys

PYTHON_DEPTH, NATIVE_DEPTH, ITERATIONS, REPETITIONS = 25, 40, 20000, 9
bench = ctypes.CDLL(sys.argv[1])
bench.bench_syncs.restype = ctypes.c_int64


def at_depth(levels, hooked):
    if levels > 0:
        return at_depth(levels - 1, hooked)
    return bench.bench_syncs(NATIVE_DEPTH - 2, ITERATIONS, hooked)


def python_depth():
    # Frames between this script's module frame and the call: at_depth recursion plus this one.
    return PYTHON_DEPTH - 2


results = {}
for hooked in (0, 1):
    runs = [at_depth(python_depth(), hooked) / ITERATIONS for _ in range(REPETITIONS)]
    results[hooked] = statistics.median(runs)
print(f"sync event, {NATIVE_DEPTH} native + {PYTHON_DEPTH} Python frames: hooked {results[1]:.0f} ns, "
      f"un-hooked {results[0]:.0f} ns, added {results[1] - results[0]:.0f} ns per event "
      f"(median of {REPETITIONS} x {ITERATIONS})")
