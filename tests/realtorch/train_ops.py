"""The host-visible CUDA operations of a training step's other parts, on the real PyTorch (R1 holds
the syncs and copies a user writes): pinning, a DataLoader that pins its batches, nn.Linear forward
and backward, SGD (foreach) and AdamW (fused) steps, and a DDP-style all-reduce on a one-rank NCCL
process group. Each op is at a line marked # PLANT; op_sequences.py records the CUDA calls each
makes, which gpu-check compares with a GPU's."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

STEPS = 10
WIDTH = 512  # 1 MiB batches of 512 rows: uploads in the caching allocator's large pool

dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                        device_id=torch.device("cuda", 0))
host = torch.randn(WIDTH, WIDTH)
linear = torch.nn.Linear(WIDTH, WIDTH, device="cuda")
sgd = torch.optim.SGD(linear.parameters(), lr=0.01, momentum=0.9, foreach=True)
adamw = torch.optim.AdamW(linear.parameters(), lr=1e-4, fused=True)
loader = DataLoader(TensorDataset(torch.randn(STEPS * WIDTH, WIDTH)), batch_size=WIDTH, pin_memory=True)
batches = iter(loader)
for step in range(STEPS):
    pinned = host.pin_memory()                           # PLANT pin_memory
    (batch,) = next(batches)                             # PLANT dataloader_pinned
    x = batch.to("cuda", non_blocking=True)
    out = linear(x)                                      # PLANT linear_forward
    loss = out.square().mean()
    loss.backward()                                      # PLANT linear_backward
    sgd.step()                                           # PLANT sgd_foreach
    adamw.step()                                         # PLANT adamw_fused
    sgd.zero_grad(set_to_none=True)
    dist.all_reduce(linear.weight.data)                  # PLANT all_reduce
torch.cuda.synchronize()
dist.destroy_process_group()
print("done")
