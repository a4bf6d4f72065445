"""The bundled example: a small data-parallel training loop, written for PyTorch and run on the
PyTorch stand-in (tests/torchlike) over the simulated CUDA runtime and NCCL (tests/simcuda).

It has the habits trainshim is built to find, and scripts/demo prints the report that names them:
- every batch is copied from pageable memory (a DataLoader with pin_memory=False, then a blocking
  `.to("cuda")`): a pageable H2D copy and a blocking upload at the `batch.to("cuda")` line;
- rank 1's dataset decodes each sample slowly (30 ms of host time): its GPU sits idle before
  every batch's upload, the report's data starvation on rank 1, named by the upload's line; and
  rank 1 arrives last at the all-reduce, the straggler, with the lines its host was in;
- the loss is read back every step with `loss.item()` and logged (5 ms of host work) before the
  optimizer's kernel is queued: a hidden synchronisation per step there, and the GPU idle time
  it costs (its bubble).
The model's work is simulated kernels of known names and durations (bf16 GEMMs, 18 ms a step), so
the report's GPU busy and idle shares per step are those planted here.

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
import time

import torch
from torch.utils.data import DataLoader, Dataset

from gpu_plant import BF16_GEMMS, ELEMENTWISE, Kernel
from sim import NCCL_FLOAT32, NCCL_SUM, check, cuda, world_communicator

STEPS = int(os.environ.get("SIM_TRAIN_STEPS", "40"))
FEATURES = 4096
FORWARD_US, BACKWARD_US, OPTIMIZER_US = 6000, 10000, 2000


class Samples(Dataset):
    """One sample per step; `decode_seconds` of host work each (decoding, augmentation)."""

    def __init__(self, decode_seconds):
        self.decode_seconds = decode_seconds

    def __len__(self):
        return STEPS

    def __getitem__(self, index):
        time.sleep(self.decode_seconds)
        return torch.randn(FEATURES)


def log_loss(value):
    time.sleep(0.005)  # formatting and sending the value to a metrics service


def all_reduce(comm, tensor):
    """Sums `tensor` over the ranks in place, on torch's current stream, as ProcessGroupNCCL does."""
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    check(cuda.ncclAllReduce(ctypes.c_void_p(tensor.data_ptr()), ctypes.c_void_p(tensor.data_ptr()),
                             ctypes.c_size_t(tensor.numel()), NCCL_FLOAT32, NCCL_SUM, comm, stream), "ncclAllReduce")


def main():
    # The launcher (scripts/simrun, as torchrun) sets RANK and WORLD_SIZE: the communicator spans
    # every rank of the job.
    rank, comm = world_communicator()
    stream = torch.cuda.current_stream().cuda_stream
    forward, backward, optimizer = Kernel(BF16_GEMMS[0]), Kernel(BF16_GEMMS[1]), Kernel(ELEMENTWISE)
    loader = DataLoader(Samples(0.030 if rank == 1 else 0.0), batch_size=1, pin_memory=False)  # rank 1 decodes slowly
    weights = torch.randn(1, FEATURES, device="cuda")
    for batch in loader:
        inputs = batch.to("cuda")  # pageable batch, blocking upload
        forward.launch(stream, FORWARD_US)
        backward.launch(stream, BACKWARD_US)
        gradients = inputs * weights
        loss = gradients.sum()
        all_reduce(comm, gradients)
        last_loss = loss.item()  # loss.item() every step
        log_loss(last_loss)
        optimizer.launch(stream, OPTIMIZER_US)
    cuda.ncclCommDestroy(comm)
    print(f"rank {rank}: {STEPS} steps done, last loss {last_loss:.3f}")


if __name__ == "__main__":
    main()
