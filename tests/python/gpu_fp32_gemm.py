"""Matrix multiplies in FP32 or in bf16, told apart by their kernels' names alone.

Each step: two GEMM kernels (3 ms and 2 ms), a 1 ms elementwise kernel, and a stream sync at the
line marked PLANTED step_end. GPU_GEMM_PRECISION=fp32 (the default) names the GEMMs as cuBLAS
names its FP32 kernels (SGEMM, xmma f32): 5/6 of the GPU's busy time is FP32 GEMM, the AMP
finding. GPU_GEMM_PRECISION=bf16 names them as its bf16 tensor-core kernels: no finding.
The job's standard output depends only on its data, so that a run under trainshim can be
compared byte for byte with a run without it.
"""
import ctypes
import os

from gpu_plant import BF16_GEMMS, ELEMENTWISE, FP32_GEMMS, Kernel
from sim import D2H, H2D, check, cuda

STEPS = int(os.environ.get("GPU_STEPS", "12"))
GEMM_US = (3000, 2000)
ELEMENTWISE_US = 1000
VALUES = 256


def main():
    precision = os.environ.get("GPU_GEMM_PRECISION", "fp32")
    names = FP32_GEMMS if precision == "fp32" else BF16_GEMMS
    gemms = [Kernel(name) for name in names]
    elementwise = Kernel(ELEMENTWISE)
    stream, device = ctypes.c_void_p(), ctypes.c_void_p()
    check(cuda.cudaStreamCreate(ctypes.byref(stream)), "cudaStreamCreate")
    check(cuda.cudaMalloc(ctypes.byref(device), ctypes.c_size_t(4 * VALUES)), "cudaMalloc")
    values = (ctypes.c_float * VALUES)(*range(VALUES))
    check(cuda.cudaMemcpy(device, values, ctypes.c_size_t(4 * VALUES), H2D), "upload")
    for _ in range(STEPS):
        for gemm, microseconds in zip(gemms, GEMM_US):
            gemm.launch(stream, microseconds)
        elementwise.launch(stream, ELEMENTWISE_US)
        check(cuda.cudaStreamSynchronize(stream), "step end")  # PLANTED step_end
    result = (ctypes.c_float * VALUES)()
    check(cuda.cudaMemcpy(result, device, ctypes.c_size_t(4 * VALUES), D2H), "download")
    print(f"{precision}: {STEPS} steps, checksum {sum(result):.1f}")


if __name__ == "__main__":
    main()
