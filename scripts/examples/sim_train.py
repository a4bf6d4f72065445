"""The bundled example: a small data-parallel training loop, written for PyTorch and run on the
PyTorch stand-in (tests/torchlike) over the simulated CUDA runtime.

It has the habits trainshim is built to find: every batch is copied from pageable memory (a
DataLoader with pin_memory=False, then a blocking `.to("cuda")`), the loss is read back every step
with `loss.item()`, gradients are all-reduced, and rank 1 computes more slowly than the others.
The all-reduce calls NCCL on torch's current stream through ctypes, as ProcessGroupNCCL does
natively. Run it with scripts/demo.
"""
import ctypes
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(os.environ.get("SIM_TRAIN_STEPS", "40"))
BATCH, FEATURES = 64, 4096
NCCL_FLOAT32, NCCL_SUM = 7, 0


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


def nccl_world(rank, world):
    # Looked up in the global scope, as libtorch_cuda's own references to NCCL are bound: the
    # calls reach a preloaded library first.
    ctypes.CDLL("libnccl.so.2", mode=os.RTLD_GLOBAL)
    nccl = ctypes.CDLL(None)
    unique_id, comm = UniqueId(), ctypes.c_void_p()
    if nccl.ncclGetUniqueId(ctypes.byref(unique_id)) or nccl.ncclCommInitRank(ctypes.byref(comm), world, unique_id, rank):
        raise SystemExit("NCCL initialisation failed")
    return nccl, comm


def all_reduce(nccl, comm, tensor):
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    if nccl.ncclAllReduce(ctypes.c_void_p(tensor.data_ptr()), ctypes.c_void_p(tensor.data_ptr()),
                          ctypes.c_size_t(tensor.numel()), NCCL_FLOAT32, NCCL_SUM, comm, stream):
        raise SystemExit("all-reduce failed")


def main():
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    nccl, comm = nccl_world(rank, world)
    data = TensorDataset(torch.randn(STEPS * BATCH, FEATURES))
    loader = DataLoader(data, batch_size=BATCH, pin_memory=False)
    weights = torch.randn(BATCH, FEATURES, device="cuda")
    repeats = 2 if rank == 1 else 1  # rank 1 is the straggler
    for (batch,) in loader:
        inputs = batch.to("cuda")  # pageable batch, blocking upload
        for _ in range(repeats):
            gradients = inputs * weights
        loss = gradients.sum()
        all_reduce(nccl, comm, gradients)
        last_loss = loss.item()  # loss.item() every step
    nccl.ncclCommDestroy(comm)
    print(f"rank {rank}: {STEPS} steps done, last loss {last_loss:.3f}")


if __name__ == "__main__":
    main()
