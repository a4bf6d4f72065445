"""R2: real torchrun, ProcessGroupNCCL and DDP, fed by DataLoader(pin_memory=True, num_workers=2):
pinned uploads are no finding, the per-step loss.item() is, and every rank's all-reduces match.

R2_INIT picks how the process group makes its NCCL communicator (ProcessGroupNCCL::getNCCLComm):
  lazy         init_process_group("nccl") as most jobs call it: no device_id, so the communicator
               is made by the first collective (DDP's constructor's), on the current device;
  eager        device_id given: made inside init_process_group (eager_connect_single_device);
  nonblocking  eager, with TORCH_NCCL_USE_COMM_NONBLOCKING=1 set by the scenario: the communicator
               is made by ncclCommInitRankConfig(blocking=0) and every NCCL call may answer
               ncclInProgress, which ProcessGroupNCCL polls with ncclCommGetAsyncError."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(os.environ.get("R2_STEPS", "10"))
INIT = os.environ.get("R2_INIT", "lazy")


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
    # The real torch seeds its generators at random in every process (an H200 printed a different
    # torch.initial_seed() each run): seeded, so the job prints the same with and without trainshim.
    torch.manual_seed(0)
    if INIT == "lazy":
        dist.init_process_group("nccl")
    else:
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
