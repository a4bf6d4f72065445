"""Real PyTorch jobs with planted GPU idle time, for scripts/gpu-check's GPU timeline checks.

    python3 gpu_timeline_torch.py SCENARIO

loader    DataLoader(num_workers=0, pin_memory=False) whose __getitem__ spends 60 ms on the host
          per batch (GPU_LOADER_MS), a blocking upload at GPU-TIMELINE upload, ~20 ms of GPU work,
          loss.item(); measures the GPU's idle time before each upload with CUDA events
item      loss.item() at GPU-TIMELINE item, then 20 ms of host work before the next kernel
          (measured up to that kernel's launch); GPU_ITEM_READ=0: neither, the step ended by a
          torch.cuda.synchronize() (the twin that checks what the report predicts dropping them buys)
fp32      matmuls in FP32 (TF32 off, torch's default)
bf16      the same matmuls under torch.autocast(dtype=torch.bfloat16)
balanced  pinned batches uploaded non_blocking a step ahead, the loss read two steps late;
          measures the host's time from each step's end to the next's
profiler_first / profiler_later
          torch.profiler (CUDA activities) opened before the first CUDA call / after 20 steps;
          prints how many GPU kernels the profiler's own trace holds
driver    cuStreamSynchronize at GPU-TIMELINE driver_sync and cuMemcpyDtoH_v2 into pageable
          memory at GPU-TIMELINE driver_copy, through pointers from cudaGetDriverEntryPoint
overhead  a loop of many small kernels (CUPTI's worst case) for OVERHEAD_SECONDS (20); prints
          the mean step time

With GPU_PLANT_OUT set, the job writes its own host measurements of the planted intervals to
$GPU_PLANT_OUT/rank0.json ({"intervals": {name: [seconds...]}, "device": the GPU's name}), for the
check to compare.
"""
import ctypes
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

STEPS = int(os.environ.get("GPU_STEPS", "20"))
LOADER_S = int(os.environ.get("GPU_LOADER_MS", "60")) / 1000
ITEM_READ = os.environ.get("GPU_ITEM_READ", "1") == "1"
DEVICE = torch.device("cuda")
MEASURED = {}


def measure(name, seconds):
    MEASURED.setdefault(name, []).append(seconds)


def write_measurements():
    folder = os.environ.get("GPU_PLANT_OUT")
    if folder:
        with open(os.path.join(folder, "rank0.json"), "w", encoding="utf-8") as f:
            json.dump({"rank": 0, "intervals": MEASURED, "device": torch.cuda.get_device_name(0)}, f)


def matmul_chain(weights, x, count):
    for _ in range(count):
        x = torch.tanh(x @ weights)
    return x


def gpu_work(weights, x, milliseconds):
    """About `milliseconds` of bf16 matmuls (calibrated once by calibrate())."""
    return matmul_chain(weights, x, max(1, round(milliseconds / calibrate.matmul_ms)))


def calibrate(weights, x):
    # Warm-up: the first calls create cuBLAS's handle and fill the caching allocator.
    for _ in range(5):
        x = torch.tanh(x @ weights)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        x = torch.tanh(x @ weights)
    end.record()
    end.synchronize()
    calibrate.matmul_ms = start.elapsed_time(end) / 20


def model_state(size=4096):
    """Weights and activations for gpu_work(); `size` 8192 makes each matmul about 1 ms on an
    H100-class GPU (and on the simulated one), long enough for the GPU to run ahead of the host."""
    weights = torch.randn(size, size, device=DEVICE, dtype=torch.bfloat16) / size**0.5
    x = torch.randn(size, size, device=DEVICE, dtype=torch.bfloat16)
    calibrate(weights, x)
    return weights, x


def warm_up(step):
    """Runs `step` (which returns the tensors a step of the loop keeps) three times before the
    measured loop, each time while the previous step's tensors are still alive, as in the loop.
    PyTorch's caching allocator takes its blocks from cudaMalloc in the first steps that need them
    (about 35 ms for a 64 MiB block on the simulated GPU): host time that is no part of what a
    scenario plants, and that otherwise lands in step 0 or 1 depending on which tensors are alive."""
    kept = None
    for _ in range(3):
        kept = step()
        torch.cuda.synchronize()
    del kept


class SlowDecode(Dataset):
    def __len__(self):
        return STEPS

    def __getitem__(self, index):
        time.sleep(LOADER_S)  # decoding and augmenting one batch
        return torch.randn(64, 4096)


def timing_event():
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event


def loader():
    """Measures, besides the loader's time on the host, the GPU's idle time around each gap with
    its own events: from one after the step's last kernel to one after the next upload, a bound
    on the gap from above (gpu_idle[k]: before step k + 1's upload)."""
    weights, x = model_state()

    def work(inputs):
        out = gpu_work(weights, x, 20)
        return inputs, out, out.float().mean() + inputs.mean()

    warm_up(lambda: work(torch.randn(64, 4096, device=DEVICE)))
    started = time.perf_counter()
    idle = []
    last_done = None
    for batch in DataLoader(SlowDecode(), batch_size=None, num_workers=0, pin_memory=False):
        measure("loader", time.perf_counter() - started)
        inputs = batch.to(DEVICE)  # GPU-TIMELINE upload
        if last_done is not None:
            idle.append((last_done, timing_event()))
        inputs, out, loss = work(inputs)
        last_done = timing_event()
        loss.item()
        started = time.perf_counter()
    torch.cuda.synchronize()
    for done, upload in idle:
        measure("gpu_idle", done.elapsed_time(upload) / 1000)


def item():
    weights, x = model_state()
    warm_up(lambda: (gpu_work(weights, x, 4).float().mean(), gpu_work(weights, x @ weights, 4)))
    for _ in range(STEPS):
        out = gpu_work(weights, x, 4)
        if ITEM_READ:
            out.float().mean().item()  # GPU-TIMELINE item
            started = time.perf_counter()
            time.sleep(0.020)  # logging the value to a metrics client
        else:
            started = time.perf_counter()
            torch.cuda.synchronize()  # no value read: the step ends where a step timer would end it
        # The bubble ends when the next kernel starts: measured to the return of its launch.
        first = x @ weights
        measure("after_item", time.perf_counter() - started)
        gpu_work(weights, first, 4)


def matmuls(dtype_context):
    a = torch.randn(4096, 4096, device=DEVICE)
    b = torch.randn(4096, 4096, device=DEVICE)
    for _ in range(STEPS):
        with dtype_context():
            c = a @ b
            c = c @ b
        c.float().sum().item()


class NoAutocast:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def fp32():
    matmuls(NoAutocast)


def bf16():
    matmuls(lambda: torch.autocast("cuda", dtype=torch.bfloat16))


def balanced():
    # Matmuls of about 1 ms each, and the loss read two steps late: the GPU's queue stays a step
    # or more ahead of the host's launches.
    weights, x = model_state(8192)
    warm_up(lambda: gpu_work(weights, x, 10).float().mean() + torch.randn(64, 4096, device=DEVICE).mean())
    batches = [torch.randn(64, 4096).pin_memory() for _ in range(2)]
    next_input = batches[0].to(DEVICE, non_blocking=True)
    losses = []
    ended = time.perf_counter()
    for step in range(STEPS):
        inputs = next_input
        next_input = batches[(step + 1) % 2].to(DEVICE, non_blocking=True)
        losses.append(gpu_work(weights, x, 10).float().mean() + inputs.mean())
        if len(losses) > 2:
            losses.pop(0).item()
        # The host's time from one step's end to the next's: a step's GPU time while the host keeps
        # up; more where the host fell behind, which only then lets the GPU's queue run dry.
        measure("period", time.perf_counter() - ended)
        ended = time.perf_counter()
    torch.cuda.synchronize()


def profiled(start_after):
    """A fixed number of kernels per step (not a calibrated time): the count the profiler prints
    is the same with and without trainshim."""
    from torch.profiler import ProfilerActivity, profile

    kernels = 0
    if start_after == 0:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            weights, x = model_state()
            for _ in range(STEPS):
                matmul_chain(weights, x, 8).float().mean().item()
    else:
        weights, x = model_state()
        for _ in range(start_after):
            matmul_chain(weights, x, 8).float().mean().item()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(STEPS):
                matmul_chain(weights, x, 8).float().mean().item()
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernels += 1
    print(f"profiler kernels: {kernels}")


def profiler_first():
    profiled(0)


def profiler_later():
    profiled(20)


def linked_cudart():
    """The process's global scope, where a C++ extension linked with -lcudart finds
    cudaGetDriverEntryPoint. ctypes.CDLL(path) would look the function up in libcudart's own
    scope instead, past any LD_PRELOAD library, as cuda-python does (docs/recording.md)."""
    cudart = ctypes.CDLL(None)
    if not hasattr(cudart, "cudaGetDriverEntryPoint"):
        sys.exit("cudaGetDriverEntryPoint is not in the process's global scope")
    return cudart


def driver_function(cudart, name, restype, *argtypes):
    pointer, status = ctypes.c_void_p(), ctypes.c_int()
    if hasattr(cudart, "cudaGetDriverEntryPointByVersion"):
        rc = cudart.cudaGetDriverEntryPointByVersion(name.encode(), ctypes.byref(pointer), 12000, ctypes.c_ulonglong(0),
                                                     ctypes.byref(status))
    else:
        rc = cudart.cudaGetDriverEntryPoint(name.encode(), ctypes.byref(pointer), ctypes.c_ulonglong(0),
                                            ctypes.byref(status))
    if rc != 0 or not pointer.value:
        sys.exit(f"cudaGetDriverEntryPoint({name}) failed: {rc}, status {status.value}")
    return ctypes.CFUNCTYPE(restype, *argtypes)(pointer.value)


def driver():
    weights, x = model_state()
    cudart = linked_cudart()
    stream_synchronize = driver_function(cudart, "cuStreamSynchronize", ctypes.c_int, ctypes.c_void_p)
    copy_to_host = driver_function(cudart, "cuMemcpyDtoH", ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64,
                                   ctypes.c_size_t)
    result = torch.empty(1024, device=DEVICE)
    host = ctypes.create_string_buffer(4 * 1024)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    for _ in range(STEPS):
        gpu_work(weights, x, 2)
        if stream_synchronize(stream) != 0:  # GPU-TIMELINE driver_sync
            sys.exit("cuStreamSynchronize failed")
        if copy_to_host(host, result.data_ptr(), 4 * 1024) != 0:  # GPU-TIMELINE driver_copy
            sys.exit("cuMemcpyDtoH failed")


def overhead():
    layers = [torch.nn.Linear(256, 256).to(DEVICE) for _ in range(16)]
    x = torch.randn(64, 256, device=DEVICE)
    deadline = time.perf_counter() + float(os.environ.get("OVERHEAD_SECONDS", "20"))
    steps, started = 0, None
    while time.perf_counter() < deadline:
        y = x
        for layer in layers:
            y = torch.relu(layer(y))
        y.sum().item()
        steps += 1
        if steps == 50:  # warm-up done
            started, counted = time.perf_counter(), 0
        elif started is not None:
            counted += 1
    print(f"step_ms {(time.perf_counter() - started) / counted * 1000:.4f} over {counted} steps")


SCENARIOS = {f.__name__: f for f in (loader, item, fp32, bf16, balanced, profiler_first, profiler_later, driver,
                                     overhead)}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SCENARIOS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(SCENARIOS)}")
    SCENARIOS[sys.argv[1]]()
    write_measurements()
