"""S8 (R13): a CUDA-graph capture in global mode while all-reduces are in flight must not be
broken by trainshim. S8_BIG_ELEMENTS and S8_STATIC_ELEMENTS shrink the tensors (the simulated
runtime computes on the host).

S8_CAPTURE picks how the graph is captured: `direct` (CUDAGraph.capture_begin/capture_end on a
side stream, the default), `context` (the torch.cuda.graph context manager, whose __enter__
synchronises the device and empties the caching allocator's cache before each capture: R12), or
`context_once` (the same, captured at the first step only and replayed after: R12's fix)."""
import os
import socket

import torch
import torch.distributed as dist

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
if "MASTER_PORT" not in os.environ:
    # A port of its own: S8 and R12 (this script too) run side by side in CI.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
dist.init_process_group("nccl", rank=0, world_size=1)
big = torch.randn(int(os.environ.get("S8_BIG_ELEMENTS", 256 << 20)), device="cuda")
static = torch.randn(int(os.environ.get("S8_STATIC_ELEMENTS", 1 << 20)), device="cuda")
CAPTURE = os.environ.get("S8_CAPTURE", "direct")
s = torch.cuda.Stream()
g = None
for i in range(50):
    dist.all_reduce(big)                       # PLANT allreduce
    if CAPTURE == "direct":
        g = torch.cuda.CUDAGraph()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            g.capture_begin(capture_error_mode="global")   # PLANT capture
            for _ in range(2000):
                static.mul_(1.0001)
            g.capture_end()
    elif g is None or CAPTURE == "context":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="global"):   # PLANT graph_context
            for _ in range(2000):
                static.mul_(1.0001)
    g.replay()
torch.cuda.synchronize()                       # PLANT final_sync
dist.destroy_process_group()
