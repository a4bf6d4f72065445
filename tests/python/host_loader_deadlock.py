"""A DataLoader deadlock with no collective pending, for the hang test: two ranks on the PyTorch
stand-in, each with one loader worker. From batch STUCK_AT on, the worker's __getitem__ waits for
a lock that the dataset itself holds (a lock taken before the fork and never released in the
child, the classic way a worker deadlocks), so every rank's main thread blocks in the loader's
queue get (re-tried every 5 s, forever) after the all-reduces of the steps before have all
completed. The test kills the job.
"""
import ctypes
import os
import threading

import torch
from torch.utils.data import DataLoader, Dataset

from host_plant import ready
from sim import all_reduce, check, cuda, world_communicator

STEPS = 10
STUCK_AT = 3
FEATURES = 256


class LockedShards(Dataset):
    def __init__(self):
        self.lock = threading.Lock()

    def __len__(self):
        return STEPS

    def __getitem__(self, index):
        if index >= STUCK_AT:
            self.lock.acquire()  # held since before the fork: never released in the worker
        return torch.randn(FEATURES)


def train(loader, comm, rank):
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    gradients = torch.zeros(FEATURES, device="cuda")
    batches = iter(loader)
    for step in range(STEPS):
        if step == STUCK_AT:
            ready(rank)
        batch = next(batches)  # PLANTED wait_batch
        inputs = batch.to("cuda")
        all_reduce(comm, ctypes.c_void_p(gradients.data_ptr()), FEATURES, stream)
        inputs.sum().item()


def main():
    rank, comm = world_communicator()
    dataset = LockedShards()
    dataset.lock.acquire()
    loader = DataLoader(dataset, batch_size=1, num_workers=1, prefetch_factor=1)
    train(loader, comm, rank)


if __name__ == "__main__":
    main()
