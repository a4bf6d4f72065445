"""S2 (R2): a blocking upload syncs after its H2D copy and is not `.cpu()`; a pinned non_blocking
upload does not sync at all; a download is `.cpu()`."""
import torch

host = torch.randn(1 << 20)                         # pageable
pinned = torch.randn(1 << 20).pin_memory()
for step in range(20):
    a = host.to("cuda")                             # PLANT upload_blocking
    b = pinned.to("cuda", non_blocking=True)        # PLANT upload_async
    c = (a + b).to("cpu")                           # PLANT download
