"""The bundled example: a small data-parallel training loop, written for PyTorch and run on the
PyTorch stand-in (tests/torchlike) over the simulated CUDA runtime and NCCL (tests/simcuda).

It has the habits trainshim is built to find, and scripts/demo prints the report that names them:
- every batch is copied from pageable memory (a DataLoader with pin_memory=False, then a blocking
  `.to("cuda")`): a pageable H2D copy and a blocking upload at the `batch.to("cuda")` line;
- the loss is read back every step with `loss.item()`: a hidden synchronisation per step there;
- gradients are all-reduced every step and rank 1 computes twice as long as the others: rank 1
  arrives last at the all-reduce and is named the straggler, with the lines its host was in.

The all-reduce calls NCCL on torch's current stream through ctypes, as ProcessGroupNCCL does
natively, with the bindings of the simulated runtime that the tests' Python jobs use too
(tests/python/sim.py). scripts/demo builds the CMake target `demo` (trainshim, the simulated
runtime and the stand-in) and puts the stand-in and the bindings on PYTHONPATH. By hand, from the
source directory after that build:
  LD_LIBRARY_PATH=build/tests/simcuda PYTHONPATH=build/torchlike/site-packages:tests/python \\
    build/bin/trainshim run -- scripts/simrun -n 2 -- python3 scripts/examples/sim_train.py
SIM_TRAIN_STEPS sets the number of steps (default 40). Each rank prints one line when it is done
(its steps and last loss), then trainshim prints its report.

The report names the lines of this file: keep the training loop where it is, or the lines the
report prints change with it.
"""
import ctypes
import os

import torch
from torch.utils.data import DataLoader, TensorDataset

from sim import NCCL_FLOAT32, NCCL_SUM, check, cuda, world_communicator

STEPS = int(os.environ.get("SIM_TRAIN_STEPS", "40"))
BATCH, FEATURES = 64, 4096


def all_reduce(comm, tensor):
    """Sums `tensor` over the ranks in place, on torch's current stream, as ProcessGroupNCCL does."""
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    check(cuda.ncclAllReduce(ctypes.c_void_p(tensor.data_ptr()), ctypes.c_void_p(tensor.data_ptr()),
                             ctypes.c_size_t(tensor.numel()), NCCL_FLOAT32, NCCL_SUM, comm, stream), "ncclAllReduce")


def main():
    # The launcher (scripts/simrun, as torchrun) sets RANK and WORLD_SIZE: the communicator spans
    # every rank of the job.
    rank, comm = world_communicator()
    data = TensorDataset(torch.randn(STEPS * BATCH, FEATURES))
    loader = DataLoader(data, batch_size=BATCH, pin_memory=False)
    weights = torch.randn(BATCH, FEATURES, device="cuda")
    repeats = 2 if rank == 1 else 1  # rank 1 is the straggler
    for (batch,) in loader:
        inputs = batch.to("cuda")  # pageable batch, blocking upload
        for _ in range(repeats):
            gradients = inputs * weights
        loss = gradients.sum()
        all_reduce(comm, gradients)
        last_loss = loss.item()  # loss.item() every step
    cuda.ncclCommDestroy(comm)
    print(f"rank {rank}: {STEPS} steps done, last loss {last_loss:.3f}")


if __name__ == "__main__":
    main()
