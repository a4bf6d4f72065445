"""S7 (R8): a sync inside a torch.compile'd function belongs to the user's script, not to
inductor's generated module. On the real torch the compiled function's frame runs Dynamo's
transformed code, whose line is the code object's first: the decorator's (PLANT compiled_def)."""
import torch
import torch._dynamo

torch._dynamo.config.capture_dynamic_output_shape_ops = True


@torch.compile                   # PLANT compiled_def
def pick(x):
    return x[x > 0].sum()        # PLANT compiled_nonzero


x = torch.randn(1 << 16, device="cuda")
for step in range(20):
    pick(x)                      # PLANT compiled_call
