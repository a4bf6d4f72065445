"""S4 (R5, R6): Event.synchronize(), Stream.synchronize() and dist.barrier() are waits the code
asked for: explicit, and nothing hidden."""
import os

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29511")
dist.init_process_group("nccl", rank=0, world_size=1)
t = torch.ones(1 << 20, device="cuda")
for step in range(10):
    ev = torch.cuda.Event(); ev.record(); ev.synchronize()      # PLANT event_sync
    torch.cuda.current_stream().synchronize()                    # PLANT stream_sync
    dist.all_reduce(t); dist.barrier()                           # PLANT barrier
dist.destroy_process_group()
