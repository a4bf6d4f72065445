"""S5 (R3, R4): torch ops that call item() inside are named after the op; print of a CUDA tensor
is one site."""
import torch

# The real torch seeds its generators at random in every process (an H200 printed a different
# torch.initial_seed() each run): seeded, so the job prints the same with and without trainshim.
torch.manual_seed(0)
x = torch.randint(0, 50, (1 << 16,), device="cuda")
r = torch.randint(0, 3, (1 << 10,), device="cuda")
for step in range(10):
    u = torch.unique(x)                          # PLANT unique
    v = torch.repeat_interleave(r)               # PLANT repeat_interleave
    same = torch.equal(x, x.clone())             # PLANT equal
    ub = torch.unique(x > 25)                    # PLANT unique_bool
print(x[:8])                                      # PLANT print
