"""Real PyTorch jobs with planted host behaviour, for scripts/gpu-check's host checks (the same
plants as tests/python/host_*.py on the stand-in).

    python3 host_torch.py SCENARIO          (straggler and first_collective: under torchrun, 2 GPUs)

straggler         rank 1 sleeps 40 ms per step in load_shard (HOST-CHECK sleep) before the all-reduce
                  (HOST_SHARD_MS; 0: the twin without the straggler)
loader            DataLoader(num_workers=0) whose __getitem__ sleeps 25 ms (HOST_DECODE_MS); next() at
                  HOST-CHECK next_batch (HOST_WORKERS: worker processes, 0 by default; the twins fixed
                  by a fast decode and by 16 workers)
loader_workers    the same with one worker process, 30 ms per batch
deadlock          one worker that blocks forever from batch 3 on (a lock held across the fork)
first_collective  rank 1 never enters the first all-reduce: it sleeps at HOST-CHECK checkpoint
spin              a pure-Python busy loop holding the GIL at HOST-CHECK spin, after some CUDA work
setup             a well-set-up loop: a persistent pinned-memory loader, non_blocking uploads,
                  50 ms of GPU work per step

With HOST_PLANT_OUT set, the job writes its own measurement of each next() call to
$HOST_PLANT_OUT/rank<R>.json ({"intervals": {"input_wait": [seconds...]}}), and rank<R>.ready
with its pid when it reached a planted hang or spin.
"""
import json
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, TensorDataset

from gpu_timeline_torch import gpu_work, model_state

STEPS = int(os.environ.get("HOST_STEPS", "40"))
RANK = int(os.environ.get("RANK", "0"))
OUT = os.environ.get("HOST_PLANT_OUT")
SHARD_S = int(os.environ.get("HOST_SHARD_MS", "40")) / 1000
DECODE_S = int(os.environ.get("HOST_DECODE_MS", "25")) / 1000
WORKERS = int(os.environ.get("HOST_WORKERS", "0"))


def ready():
    if OUT:
        with open(os.path.join(OUT, f"rank{RANK}.ready"), "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))


def init():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=RANK, world_size=int(os.environ.get("WORLD_SIZE", "1")),
                            device_id=torch.device("cuda", torch.cuda.current_device()))
    return torch.ones(1 << 16, device="cuda")


def load_shard():
    time.sleep(SHARD_S)  # HOST-CHECK sleep


def straggler():
    grads = init()
    for _ in range(STEPS):
        grads.mul_(1.0)
        if RANK == 1:
            load_shard()
        dist.all_reduce(grads)
        torch.cuda.synchronize()


class Decoded(Dataset):
    def __init__(self, seconds, lock=None):
        self.seconds, self.lock = seconds, lock

    def __len__(self):
        return STEPS

    def __getitem__(self, index):
        if self.lock is not None and index >= 3:
            self.lock.acquire()  # held since before the fork
        time.sleep(self.seconds)
        return torch.randn(256)


def train(loader, ready_at=None):
    grads = init()
    waits = []
    batches = iter(loader)
    for step in range(STEPS):
        if step == ready_at:
            ready()
        start = time.perf_counter()
        batch = next(batches)  # HOST-CHECK next_batch
        waits.append(time.perf_counter() - start)
        x = batch.to("cuda")
        dist.all_reduce(grads)
        x.sum().item()
    if OUT:
        with open(os.path.join(OUT, f"rank{RANK}.json"), "w", encoding="utf-8") as f:
            json.dump({"rank": RANK, "intervals": {"input_wait": waits}}, f)


def deadlock():
    dataset = Decoded(0.0, threading.Lock())
    dataset.lock.acquire()
    train(DataLoader(dataset, batch_size=1, num_workers=1, prefetch_factor=1), ready_at=3)


def first_collective():
    grads = init()
    if RANK == 1:
        ready()
        while True:
            time.sleep(0.5)  # HOST-CHECK checkpoint
    ready()
    dist.all_reduce(grads)
    torch.cuda.synchronize()


def spin():
    x = torch.ones(1 << 20, device="cuda")
    for _ in range(3):
        x.sum().item()
    ready()
    n = 0
    while True:
        n += 1  # HOST-CHECK spin


def setup():
    """As tests/python/host_setup.py: about 50 ms of GPU work per step, for 4 epochs of 8 batches,
    so that the worker keeps ahead of the loop and the census sees it."""
    grads = init()
    # Matmuls long enough (about 1 ms each) that the loop waits for the GPU, not the GPU for the loop.
    weights, activations = model_state(8192)
    loader = DataLoader(TensorDataset(torch.randn(32, 256)), batch_size=4, num_workers=1, pin_memory=True,
                        persistent_workers=True)
    for _ in range(4):
        for (batch,) in loader:
            x = batch.to("cuda", non_blocking=True)
            gpu_work(weights, activations, 50)
            dist.all_reduce(grads)
            x.sum().item()


SCENARIOS = {
    "straggler": straggler,
    "loader": lambda: train(DataLoader(Decoded(DECODE_S), batch_size=1, num_workers=WORKERS)),
    "loader_workers": lambda: train(DataLoader(Decoded(0.030), batch_size=1, num_workers=1)),
    "deadlock": deadlock,
    "first_collective": first_collective,
    "spin": spin,
    "setup": setup,
}

if __name__ == "__main__":
    SCENARIOS[sys.argv[1]]()
