"""R6/R7: torch.profiler with CUDA activities beside trainshim, which holds CUPTI too: started before
the job's first CUDA call (R6: trainshim finds CUPTI taken and leaves it alone) or after steps of
work (R7: trainshim yields it at the profiler's first CUPTI call). Either way the profiler's own
trace holds the same GPU kernels as without trainshim (the output is compared)."""
import os

import torch
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
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    x = torch.ones(1 << 16, device="cuda") if x is None else x
    for _ in range(STEPS):
        x = step(x)
    torch.cuda.synchronize()
kernels = sum(e.count for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA)
print(f"the profiler saw {kernels} GPU kernel runs")
