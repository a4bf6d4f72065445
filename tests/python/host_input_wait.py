"""A rank whose DataLoader is slow, for the input-wait test: two ranks on the PyTorch stand-in
(tests/torchlike), rank 1's dataset spends HOST_LOAD_MS of host time in each __getitem__ (a slow
decode). With HOST_WORKERS=0 the main process reads the dataset itself
(_SingleProcessDataLoaderIter); with HOST_WORKERS=N, N forked workers read it and the main
thread waits for their batches in the loader's queue get (_MultiProcessingDataLoaderIter).
Rank 0 loads at once.

Each step: next() on the loader's iterator at the line marked PLANTED next_batch (the job measures
how long each call takes: the planted wait, as it really was), the batch's upload, 5 ms of GPU
work, an all-reduce and `.item()`.
"""
import ctypes
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

from host_plant import Intervals
from sim import all_reduce, check, cuda, world_communicator

STEPS = int(os.environ.get("HOST_STEPS", "40"))
LOAD_MS = float(os.environ.get("HOST_LOAD_MS", "25"))
WORKERS = int(os.environ.get("HOST_WORKERS", "0"))
SLOW_RANK = 1
FEATURES = 256


class DecodedImages(Dataset):
    def __init__(self, load_seconds):
        self.load_seconds = load_seconds

    def __len__(self):
        return STEPS

    def __getitem__(self, index):
        time.sleep(self.load_seconds)  # the decode and augmentation of one sample
        return torch.randn(FEATURES)


def train(loader, comm, measured):
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    gradients = torch.zeros(FEATURES, device="cuda")
    batches = iter(loader)
    for _ in range(STEPS):
        measured.start("input_wait")
        batch = next(batches)  # PLANTED next_batch
        measured.stop("input_wait")
        inputs = batch.to("cuda")
        check(cuda.simcudaBusy(stream, ctypes.c_uint(5000)), "forward/backward")
        all_reduce(comm, ctypes.c_void_p(gradients.data_ptr()), FEATURES, stream)
        loss = inputs.sum().item()
    return loss


def main():
    rank, comm = world_communicator()
    load_seconds = LOAD_MS / 1000 if rank == SLOW_RANK else 0.0
    loader = DataLoader(DecodedImages(load_seconds), batch_size=1, num_workers=WORKERS)
    measured = Intervals()
    loss = train(loader, comm, measured)
    measured.write(rank)
    print(f"rank {rank}: {STEPS} steps, last loss {loss:.3f}")


if __name__ == "__main__":
    main()
