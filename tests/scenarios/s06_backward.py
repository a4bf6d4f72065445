"""S6 (R7): the nonzero() of a boolean-mask index runs again in backward on the autograd thread;
it belongs to the line that called backward()."""
import torch

x = torch.randn(1 << 16, device="cuda", requires_grad=True)
for step in range(10):
    mask = x.detach() > 0
    y = x[mask]                  # PLANT mask_fwd
    y.sum().backward()           # PLANT mask_bwd
