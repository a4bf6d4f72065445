"""S8 (R13): a CUDA-graph capture in global mode while all-reduces are in flight must not be
broken by trainshim. S8_BIG_ELEMENTS and S8_STATIC_ELEMENTS shrink the tensors (the simulated
runtime computes on the host)."""
import os

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29512")
dist.init_process_group("nccl", rank=0, world_size=1)
big = torch.randn(int(os.environ.get("S8_BIG_ELEMENTS", 256 << 20)), device="cuda")
static = torch.randn(int(os.environ.get("S8_STATIC_ELEMENTS", 1 << 20)), device="cuda")
s = torch.cuda.Stream()
for i in range(50):
    dist.all_reduce(big)                       # PLANT allreduce
    g = torch.cuda.CUDAGraph()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g.capture_begin(capture_error_mode="global")   # PLANT capture
        for _ in range(2000):
            static.mul_(1.0001)
        g.capture_end()
    g.replay()
torch.cuda.synchronize()                       # PLANT final_sync
dist.destroy_process_group()
