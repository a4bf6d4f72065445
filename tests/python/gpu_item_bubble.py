"""An `.item()` bubble, for the GPU timeline's scenario tests.

PyTorch code, run on the PyTorch stand-in (tests/torchlike). Each step: a 4 ms forward kernel,
`loss.item()` at the line marked PLANTED item, then GPU_HOST_MS (5) of host work (logging the
value) before the 4 ms backward kernel is queued. The GPU sits idle from the forward kernel's end
until the backward kernel: about 5 ms per call at the item() line, its bubble. The next step's
forward kernel is queued behind the backward one, so that is the only gap. The job measures,
from item()'s return, the host's time to the backward kernel's launch ("before_launch": the bubble
holds at least that) and to the launch's return ("after_item").
"""
import os
import time

import torch

from gpu_plant import BF16_GEMMS, Intervals, Kernel

STEPS = int(os.environ.get("GPU_STEPS", "12"))
HOST_MS = float(os.environ.get("GPU_HOST_MS", "5"))
KERNEL_US = 4000


def log_metrics(value):
    time.sleep(HOST_MS / 1000)  # formatting, a logger, a metrics client
    return value


def main():
    stream = torch.cuda.current_stream().cuda_stream
    forward, backward = Kernel(BF16_GEMMS[0]), Kernel(BF16_GEMMS[1])
    weights = torch.randn(4096, device="cuda")
    measured = Intervals("GPU_PLANT_OUT")
    for step in range(STEPS):
        forward.launch(stream, KERNEL_US)
        loss = weights.sum()
        value = loss.item()  # PLANTED item
        measured.start("after_item")
        measured.start("before_launch")
        log_metrics(value)
        measured.stop("before_launch")
        backward.launch(stream, KERNEL_US)
        measured.stop("after_item")
    torch.cuda.synchronize()
    measured.write(0)
    print(f"{STEPS} steps, last loss {value:.3f}")


if __name__ == "__main__":
    main()
