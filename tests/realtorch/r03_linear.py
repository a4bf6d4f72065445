"""R3/R4: an MLP's GEMMs through cuBLAS and cuBLASLt, in FP32 (R3: the FP32-GEMM finding, from the
kernel names cuBLAS gives them) and under autocast with bf16 (R4: no such finding)."""
import os

import torch

STEPS = 20
precision = os.environ.get("R3_PRECISION", "fp32")
# The real torch seeds its generators at random in every process (an H200 printed a different
# torch.initial_seed() each run): seeded, so the job prints the same with and without trainshim.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 2048, device="cuda"), torch.nn.GELU(),
                            torch.nn.Linear(2048, 1024, device="cuda"))
optimizer = torch.optim.AdamW(model.parameters(), fused=True)
x = torch.randn(256, 1024, device="cuda")
for step in range(STEPS):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss = model(x).float().square().mean()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if step % 5 == 4:
        print(f"step {step} loss {loss.item():.3f}")  # PLANT item
