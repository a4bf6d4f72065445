"""Data starvation on one rank of two, for the GPU timeline's scenario tests.

PyTorch code, run on the PyTorch stand-in (tests/torchlike) with two ranks (scripts/simrun -n 2).
Each step: the batch from a DataLoader (num_workers=0, pin_memory=False), its blocking upload at
the line marked PLANTED upload, 20 ms of GPU work (forward and backward kernels in bf16), an
all-reduce of the gradients, and `loss.item()`. Rank 1's dataset spends GPU_LOAD_MS (30) of host
time in each __getitem__ (a slow decode or transform): its GPU waits for every batch, and the
gap ends with that batch's upload. Rank 0 loads at once: it is well fed, and only waits for
rank 1 in the all-reduce.
"""
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

from gpu_plant import BF16_GEMMS, Intervals, Kernel, all_reduce
from sim import world_communicator

STEPS = int(os.environ.get("GPU_STEPS", "12"))
LOAD_MS = float(os.environ.get("GPU_LOAD_MS", "30"))
SLOW_RANK = 1
FEATURES = 1024
FORWARD_US, BACKWARD_US = 8000, 12000


class DecodedSamples(Dataset):
    def __init__(self, load_seconds):
        self.load_seconds = load_seconds

    def __len__(self):
        return STEPS

    def __getitem__(self, index):
        time.sleep(self.load_seconds)  # the decode and augmentation of one sample
        return torch.randn(FEATURES)


def main():
    rank, comm = world_communicator()
    stream = torch.cuda.current_stream().cuda_stream
    forward, backward = Kernel(BF16_GEMMS[0]), Kernel(BF16_GEMMS[1])
    load_seconds = LOAD_MS / 1000 if rank == SLOW_RANK else 0.0
    loader = DataLoader(DecodedSamples(load_seconds), batch_size=1, pin_memory=False)
    gradients = torch.zeros(FEATURES, device="cuda")
    measured = Intervals("GPU_PLANT_OUT")
    measured.start("loader")
    measured.start("input")
    for batch in loader:
        measured.stop("loader")
        inputs = batch.to("cuda")  # PLANTED upload
        measured.stop("input")
        forward.launch(stream, FORWARD_US)
        backward.launch(stream, BACKWARD_US)
        all_reduce(comm, gradients.data_ptr(), FEATURES, stream)
        loss = inputs.sum()
        last_loss = loss.item()  # step end
        measured.start("loader")
        measured.start("input")
    measured.write(rank)
    print(f"rank {rank}: {STEPS} steps, last loss {last_loss:.3f}")


if __name__ == "__main__":
    main()
