"""R6/R7: torch.profiler with CUDA activities beside trainshim, which holds CUPTI too: started before
the job's first CUDA call (R6: trainshim finds CUPTI taken and leaves it alone) or after steps of
work (R7: trainshim yields it at the profiler's first CUPTI call). Either way the profiler's own
trace holds the same GPU kernels as without trainshim (the output is compared), each tied to the op
that launched it (Kineto's external correlation), and the item()s' stream synchronisations
(its CUDA_SYNC events); the job fails where the profiler's trace lacks them."""
import collections
import json
import os
import tempfile

import torch
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile

STEPS = 10
x = torch.ones(1 << 16, device="cuda") if os.environ.get("R6_PROFILER") == "later" else None


def step(x):
    x = x * 2 + 1
    x.sum().item()  # PLANT item
    return x


if x is not None:
    for _ in range(STEPS):
        x = step(x)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
             experimental_config=_ExperimentalConfig(enable_cuda_sync_events=True)) as prof:
    x = torch.ones(1 << 16, device="cuda") if x is None else x
    for _ in range(STEPS):
        x = step(x)
    torch.cuda.synchronize()
# The trace as users open it: each kernel and copy carries the External id of the op that launched
# it, and each synchronisation is a cuda_sync event named by its kind.
with tempfile.TemporaryDirectory() as scratch:
    path = os.path.join(scratch, "trace.json")
    prof.export_chrome_trace(path)
    with open(path, encoding="utf-8") as f:
        trace = json.load(f)["traceEvents"]
ops = {e["args"]["External id"]: e["name"] for e in trace if e.get("cat") == "cpu_op"}
work = [e for e in trace if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
launched_by = collections.Counter(ops.get(e["args"].get("External id"), "no op") for e in work)
syncs = collections.Counter(e["name"] for e in trace if e.get("cat") == "cuda_sync")
print(f"the profiler saw {len(work)} GPU kernel and copy runs, by the op that launched them: "
      + ", ".join(f"{op} {n}" for op, n in sorted(launched_by.items())))
print(f"the profiler saw {syncs['Stream Sync']} stream synchronisations")
if "no op" in launched_by or syncs["Stream Sync"] != STEPS:
    raise SystemExit("torch.profiler's trace lacks the ops of the GPU's work or their synchronisations")
