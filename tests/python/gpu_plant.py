"""What the planted GPU jobs (tests/python/gpu_*.py) share: kernels of known names and durations
on the simulated runtime, and the job's own measurement of the host intervals it planted.

A planted interval (a slow loader's 30 ms, the 5 ms of host work after an `.item()`) is what the
GPU waits for; the report must find it within 5 %. The host measures the same interval with
time.perf_counter (from the sync's return to the call that ends the GPU's wait), so that the
tests compare the report with what really happened on a loaded machine, not with the nominal
sleep. With GPU_PLANT_OUT set, each rank writes {"rank", "intervals": {name: [seconds...]}} to
$GPU_PLANT_OUT/rank<R>.json when it ends.
"""
import ctypes

import sim
from host_plant import Intervals  # noqa: F401 (the GPU plants measure with it: GPU_PLANT_OUT)
from sim import NCCL_FLOAT32, NCCL_SUM, check, cuda

# Kernel names as CUPTI reports them for cuBLAS and PyTorch (cuBLAS's are not mangled).
FP32_GEMMS = ("ampere_sgemm_128x64_nn", "sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8")
BF16_GEMMS = ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn",
              "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_"
              "kernel__5x_cublas")
ELEMENTWISE = ("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_")


class Kernel:
    """A simulated kernel named `name` (registered as nvcc's registration code does), launched
    with cudaLaunchKernel to keep its stream busy for a given time (tests/python/sim.py)."""

    def __init__(self, name):
        self.name = name
        self._stub = sim.kernel(name)

    def launch(self, stream, microseconds):
        """`stream`: a handle as torch's Stream.cuda_stream gives it (an int) or a c_void_p."""
        sim.launch(self._stub, stream, duration_ns=int(microseconds * 1000))


def all_reduce(comm, pointer, count, stream):
    """Sums `count` floats at `pointer` over the ranks in place, on `stream`."""
    check(cuda.ncclAllReduce(ctypes.c_void_p(pointer), ctypes.c_void_p(pointer), ctypes.c_size_t(count), NCCL_FLOAT32,
                             NCCL_SUM, comm, ctypes.c_void_p(stream)), "ncclAllReduce")
