#pragma once
// The per-thread-default-stream twins of the interposed driver functions, and CUDA 13's
// cuCtxSynchronize, as libcuda.so.1 exports them. cuda.h declares the twins only when compiled for
// that mode (CUDA_API_PER_THREAD_DEFAULT_STREAM), under the plain names.
#include <cuda.h>

extern "C" {
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamQuery_ptsz(CUstream);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH_v2_ptds(void*, CUdeviceptr, size_t);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr, const void*, size_t, CUstream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void*, CUdeviceptr, size_t, CUstream);
CUresult cuMemcpy_ptds(CUdeviceptr, CUdeviceptr, size_t);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr, CUdeviceptr, size_t, CUstream);
}
