"""S9 (R9): a communicator created non-blocking (TORCH_NCCL_USE_COMM_NONBLOCKING=1, eager init
through device_id) and a group split from it are registered: every all-reduce is matched."""
import os

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29513")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
t = torch.ones(1 << 20, device="cuda")
for _ in range(30): dist.all_reduce(t)         # PLANT nb_allreduce
dist.new_group([0])                             # PLANT split
torch.cuda.synchronize()                        # PLANT final_sync
dist.destroy_process_group()
