"""A timed training workload on the real PyTorch, for scripts/bench/realtorch-step. Prints, on rank 0
(or the only process), one line: `step_ns <median of the timed steps>`.
  launch: 1,000 small elementwise ops per step, then torch.cuda.synchronize() (launch-bound);
  ddp:    an MLP's forward, backward (DDP all-reduce over NCCL) and AdamW step, the loss read each
          step with .item(), under torchrun.
Usage: python realtorch_workload.py launch|ddp WARMUP STEPS"""
import os
import statistics
import sys
import time

import torch


def launch_bound(warmup, steps):
    x = torch.zeros(256, device="cuda")
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter_ns()
        for _ in range(1000):
            x = x + 1
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter_ns() - start)
    return times


def ddp_mlp(warmup, steps):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(1024, 4096, device="cuda"), torch.nn.GELU(),
                            torch.nn.Linear(4096, 1024, device="cuda")), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), fused=True)
    x = torch.randn(512, 1024, device="cuda")
    times = []
    for step in range(warmup + steps):
        start = time.perf_counter_ns()
        loss = model(x).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()
        if step >= warmup:
            times.append(time.perf_counter_ns() - start)
    dist.destroy_process_group()
    return times


def main():
    mode, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    times = launch_bound(warmup, steps) if mode == "launch" else ddp_mlp(warmup, steps)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"step_ns {int(statistics.median(times))}", flush=True)


if __name__ == "__main__":
    main()
