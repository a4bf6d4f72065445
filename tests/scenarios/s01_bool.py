"""S1 (R1): `if tensor:` is bool(tensor), not nonzero(); torch.cuda.synchronize() is explicit."""
import torch

x = torch.randn(4096, device="cuda")
for step in range(20):
    y = (x * step).sum()
    if y > 0:                     # PLANT bool
        x = x * 0.99
    torch.cuda.synchronize()      # PLANT explicit
