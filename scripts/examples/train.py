"""The bundled example: a small data-parallel training job in plain PyTorch, launched by torchrun.
scripts/demo runs it on the real PyTorch wheel over the simulated GPU (scripts/torch-sim) under
`trainshim run`, and the report names the habits planted here, each at its line (# PLANT):
- every batch comes from pageable memory (DataLoader(pin_memory=False)) and is uploaded with a
  blocking `.to("cuda")`: pageable H2D copies and a blocking upload at that line;
- rank 1's dataset decodes each batch slowly (30 ms of host time): its GPU sits idle before each
  upload, and rank 1 arrives last at DDP's all-reduce, the straggler every other rank waits for;
- the loss is read back every step with `loss.item()` and logged (5 ms of host work): a hidden
  synchronisation per step, and the GPU idle time it costs;
The model runs under autocast in bf16, as it should: its GEMMs are cuBLASLt's BF16 kernels.
On a GPU node it runs as it is: torchrun --nproc_per_node 2 scripts/examples/train.py.
TRAIN_STEPS sets the number of steps (default 40), TRAIN_SLOW_DECODE_MS rank 1's decoding time
per batch (default 30), TRAIN_HIDDEN the model's hidden width (default 1024). Each plant can be fixed, for the twins that check what the report predicts
fixing it buys: TRAIN_SLOW_DECODE_MS=0, TRAIN_READ_LOSS=0 (no item() and no logging),
TRAIN_PIN_MEMORY=1 (batches in pinned memory before the loop takes them, as a DataLoader's
pin-memory thread hands them over when workers load them, uploaded with non_blocking=True).
DataLoader(pin_memory=True) without workers would pin each batch in the main thread, a copy as long
as the staging copy it saves: here pinning is done once, off the loop's path.
The model is small (8 MiB of gradients): the simulated NCCL moves the bytes of an all-reduce with
the host's CPUs, where a GPU's NVLink moves them in a fraction of a millisecond.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

STEPS = int(os.environ.get("TRAIN_STEPS", "40"))
SLOW_DECODE_S = int(os.environ.get("TRAIN_SLOW_DECODE_MS", "30")) / 1000
READ_LOSS = os.environ.get("TRAIN_READ_LOSS", "1") == "1"
PIN_MEMORY = os.environ.get("TRAIN_PIN_MEMORY", "0") == "1"
BATCH, FEATURES = 1024, 1024
HIDDEN = int(os.environ.get("TRAIN_HIDDEN", "1024"))


class Batches(Dataset):
    """One batch per step, `decode_seconds` of host work each (decoding, augmentation)."""

    def __init__(self, decode_seconds, pinned):
        self.decode_seconds = decode_seconds
        self.batch = torch.randn(BATCH, FEATURES)
        if pinned:
            self.batch = self.batch.pin_memory()

    def __len__(self):
        return STEPS

    def __getitem__(self, index):
        time.sleep(self.decode_seconds)
        return self.batch


def log_loss(step, value):
    time.sleep(0.005)  # formatting and sending the value to a metrics service


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN, device="cuda"), torch.nn.GELU(),
                                torch.nn.Linear(HIDDEN, FEATURES, device="cuda"))
    model = DistributedDataParallel(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    decode_seconds = SLOW_DECODE_S if rank == 1 else 0.0  # PLANT slow_loader
    loader = DataLoader(Batches(decode_seconds, PIN_MEMORY), batch_size=None)
    for step, batch in enumerate(loader):
        inputs = batch.to("cuda", non_blocking=PIN_MEMORY)  # PLANT upload
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(inputs).float().square().mean()  # PLANT forward
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if READ_LOSS:
            log_loss(step, loss.item())  # PLANT item
    # One write: torchrun runs Python unbuffered, where print() writes the line and its newline apart
    # and the ranks' lines interleave.
    sys.stdout.write(f"rank {rank}: {STEPS} steps done\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
