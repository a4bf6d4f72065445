"""S3: DataLoader(pin_memory=True) with workers and non_blocking copies: pinned both ways, no
pageable copy, no hidden sync; one explicit Stream.synchronize() at the end."""
import torch
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(64 * 40, 1024))
for (xb,) in DataLoader(ds, batch_size=64, pin_memory=True, num_workers=2):
    xb = xb.to("cuda", non_blocking=True)           # PLANT pinned_h2d
    out = xb.sum(1).to("cpu", non_blocking=True)    # PLANT pinned_d2h
torch.cuda.current_stream().synchronize()           # PLANT stream_sync
