// The driver API names libcuda.so.1 exports beside those cuda.h declares for an ordinary build:
// the per-thread-default-stream twins (cuda.h names them only under
// CUDA_API_PER_THREAD_DEFAULT_STREAM) and cuGetProcAddress's first version (cuda.h maps the plain
// name to cuGetProcAddress_v2). Shared by the simulated driver and the programs that call it.
#pragma once

#include <cuda.h>

#undef cuGetProcAddress

extern "C" {
// CUDA 11.3's cuGetProcAddress: no symbol status.
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
CUresult cuCtxSynchronize_v2(CUcontext ctx);
CUresult cuStreamSynchronize_ptsz(CUstream stream);
CUresult cuStreamQuery_ptsz(CUstream stream);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t bytes);
CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t bytes, CUstream stream);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream);
}
