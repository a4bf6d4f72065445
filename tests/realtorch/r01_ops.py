"""R1: the host-visible CUDA operations of a training step, on the real PyTorch; each plant is named
after the operation the user wrote, from libtorch's own frames."""
import torch

STEPS = 10
assert torch.cuda.is_available() and torch.cuda.device_count() >= 1
assert torch.cuda.get_device_properties(0).major >= 7

# 2 MiB: uploads live in the caching allocator's large pool, so the small blocks that hold the
# counts nonzero and unique read back only ever hold what no simulated kernel wrote (zeros).
host = torch.arange(1 << 19, dtype=torch.float32)
pinned = host.pin_memory()
stream = torch.cuda.Stream(priority=-1)
done = torch.cuda.Event()
for step in range(STEPS):
    x = host.to("cuda")                          # PLANT upload_blocking
    y = pinned.to("cuda", non_blocking=True)     # PLANT upload_async
    z = (x * 2 + y).relu()
    s = z.sum()
    loss = s.item()                              # PLANT item
    back = z.cpu()                               # PLANT cpu
    values = s.tolist()                          # PLANT tolist
    if s:                                        # PLANT bool
        pass
    idx = torch.nonzero(z)                       # PLANT nonzero
    u = torch.unique(z)                          # PLANT unique
    m = torch.masked_select(z, z > 1)            # PLANT masked_select
    with torch.cuda.stream(stream):
        w = z * 3
    done.record(stream)
    done.synchronize()                           # PLANT event_sync
    torch.cuda.synchronize()                     # PLANT explicit
print("shapes", tuple(idx.shape), tuple(u.shape), tuple(m.shape), tuple(back.shape), loss, values)
