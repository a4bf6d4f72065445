"""R2: real torchrun, ProcessGroupNCCL and DDP, fed by DataLoader(pin_memory=True, num_workers=2):
pinned uploads are no finding, the per-step loss.item() is, and every rank's all-reduces match."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(os.environ.get("R2_STEPS", "10"))


class Scale(torch.nn.Module):
    """Elementwise parameters only: its backward is plain kernels, no GEMM."""

    def __init__(self, width):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(width))
        self.bias = torch.nn.Parameter(torch.zeros(width))

    def forward(self, x):
        return (x * self.weight + self.bias).relu()


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    # DDP's constructor checks the parameters' shapes across ranks and reads the result on the host.
    model = DistributedDataParallel(Scale(1 << 16).cuda(), device_ids=[local_rank])  # PLANT ddp
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(STEPS * 4, 1 << 16))
    loader = DataLoader(data, batch_size=4, num_workers=2, pin_memory=True)
    for (batch,) in loader:
        batch = batch.to("cuda", non_blocking=True)  # PLANT upload
        # DDP's forward waits for the CUDA events that timed the previous iteration (its runtime
        # statistics, gathered in iterations 1-10).
        loss = model(batch).square().mean()  # PLANT forward
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        print(f"rank {dist.get_rank()} loss {loss.item():.3f}")  # PLANT item
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
