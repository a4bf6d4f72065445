"""S10 (R10, R11, R12), 2 ranks: p2p on the collective communicator, grouped all_to_all and a
straggler (rank 1). Run it under torchrun or scripts/simrun:
    torchrun --nproc_per_node 2 s10_p2p_grouped.py
once plain and once with TORCH_NCCL_RANKS_PER_ROOT=1 (ncclCommInitRankScalable)."""
import os
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"]); torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device(f"cuda:{rank}"))
t = torch.ones(1 << 22, device="cuda"); buf = torch.empty_like(t)
for step in range(30):
    if rank == 1: time.sleep(0.1)                                    # PLANT straggler
    if step % 3 == 0:
        peer = 1 - rank
        ops = [dist.P2POp(dist.isend, t, peer), dist.P2POp(dist.irecv, buf, peer)]
        for w in dist.batch_isend_irecv(ops): w.wait()              # PLANT p2p
    out = torch.empty_like(t); dist.all_to_all_single(out, t)       # PLANT all_to_all
    dist.all_reduce(t)                                              # PLANT allreduce
torch.cuda.synchronize()                                            # PLANT final_sync
dist.destroy_process_group()
