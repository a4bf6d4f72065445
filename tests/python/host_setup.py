"""A well-set-up data-parallel loop, for the setup checklist's tests (the test varies what is
around it: the sysfs tree the shim reads, the CPU affinity, NCCL_* variables). Two ranks on the
PyTorch stand-in, each on its own device (torch.cuda.set_device(LOCAL_RANK)), both alike: a fast
DataLoader with a persistent worker and pinned batches (pin_memory=True), non-blocking uploads,
50 ms of GPU work, an all-reduce and `.item()` per step, over EPOCHS epochs: a few seconds, so
that the sampler's census (about once a second) sees each rank's worker.
"""
import ctypes
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

from sim import all_reduce, check, cuda, world_communicator

EPOCHS = 4
BATCHES = 8
FEATURES = 256


def main():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    rank, comm = world_communicator()
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    gradients = torch.zeros(FEATURES, device="cuda")
    loader = DataLoader(TensorDataset(torch.randn(BATCHES * 4, FEATURES)), batch_size=4, num_workers=1,
                        pin_memory=True, persistent_workers=True)
    for _ in range(EPOCHS):
        for (batch,) in loader:
            inputs = batch.to("cuda", non_blocking=True)
            check(cuda.simcudaBusy(stream, ctypes.c_uint(50000)), "forward/backward")
            all_reduce(comm, ctypes.c_void_p(gradients.data_ptr()), FEATURES, stream)
            loss = inputs.sum().item()
    print(f"rank {rank}: {EPOCHS * BATCHES} steps, last loss {loss:.3f}")


if __name__ == "__main__":
    main()
