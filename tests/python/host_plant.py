"""What the planted host jobs (tests/python/host_*.py) share: the job's own measure of the host
time it planted (a loader's wait per step), written where the test reads it.

The report must find a planted wait within 10 % of what really happened on a loaded machine, not
of the nominal sleep: the job measures each interval with time.perf_counter. With HOST_PLANT_OUT
set, each rank writes {"rank", "intervals": {name: [seconds...]}} to $HOST_PLANT_OUT/rank<R>.json
when it ends. A job that must hang first writes $HOST_PLANT_OUT/rank<R>.ready, so that the test
knows the planted hang began.
"""
import json
import os
import time


class Intervals:
    """The host's own clock on the planted intervals, by name; written to the folder that the
    environment variable `out_variable` names (the GPU plants use GPU_PLANT_OUT)."""

    def __init__(self, out_variable="HOST_PLANT_OUT"):
        self._out_variable = out_variable
        self._started = {}
        self._seconds = {}

    def start(self, name):
        self._started[name] = time.perf_counter()

    def stop(self, name):
        begun = self._started.pop(name, None)
        if begun is not None:
            self._seconds.setdefault(name, []).append(time.perf_counter() - begun)

    def write(self, rank):
        folder = os.environ.get(self._out_variable)
        if folder:
            with open(os.path.join(folder, f"rank{rank}.json"), "w", encoding="utf-8") as f:
                json.dump({"rank": rank, "intervals": self._seconds}, f)


def ready(rank):
    """Says that this rank reached its planted hang."""
    folder = os.environ.get("HOST_PLANT_OUT")
    if folder:
        with open(os.path.join(folder, f"rank{rank}.ready"), "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
