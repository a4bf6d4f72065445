// The simulated cuBLAS (libcublas.so.13): handles with their stream, workspace, math and pointer
// modes, and the GEMMs PyTorch calls (at::cuda::blas::gemm, bgemm: cublasSgemm_v2, cublasGemmEx,
// the strided-batched forms, each with its _64 twin), which run as simulated kernels (gemm.h).
// PyTorch's handle pool (aten/src/ATen/cuda/CublasHandlePool.cpp) creates a handle per thread and
// device, sets its stream and workspace before each use, and sets the math mode: TF32 tensor-op
// math when torch.backends.cuda.matmul.allow_tf32 is set. Everything else cuBLAS exports is a
// generated stub (tests/realtorch/gen_stubs.py).
#include <cublas_api.h>

#include "gemm.h"

using namespace simcuda;

namespace {

struct Handle {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointers = CUBLAS_POINTER_MODE_HOST;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

Handle* handle_of(cublasHandle_t h) { return reinterpret_cast<Handle*>(h); }

bool transposed(cublasOperation_t op) { return op != CUBLAS_OP_N; }

bool tf32_math(const Handle& h) { return (h.math & 0xf) == CUBLAS_TF32_TENSOR_OP_MATH; }

bool tf32_compute(cublasComputeType_t compute, const Handle& h) {
  return compute == CUBLAS_COMPUTE_32F_FAST_TF32 || (compute == CUBLAS_COMPUTE_32F && tf32_math(h));
}

cublasStatus_t run(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, std::int64_t m,
                   std::int64_t n, std::int64_t k, std::int64_t batch, GemmMath math) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  Gemm g;
  g.math = math;
  g.transa = transposed(transa), g.transb = transposed(transb);
  g.m = m, g.n = n, g.k = k, g.batch = batch;
  return enqueue_gemm(handle_of(handle)->stream, g);
}

// A handle's setting, set or read as every cublasSet*/cublasGet* call does.
template <class T>
cublasStatus_t set(cublasHandle_t handle, T Handle::*field, T value) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle_of(handle)->*field = value;
  return CUBLAS_STATUS_SUCCESS;
}

template <class T>
cublasStatus_t get(cublasHandle_t handle, T Handle::*field, T* value) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!value) return CUBLAS_STATUS_INVALID_VALUE;
  *value = handle_of(handle)->*field;
  return CUBLAS_STATUS_SUCCESS;
}

GemmMath fp32_math(cublasHandle_t handle) {
  return handle && tf32_math(*handle_of(handle)) ? GemmMath::Tf32 : GemmMath::Fp32;
}

GemmMath ex_math(cublasHandle_t handle, cudaDataType_t a, cublasComputeType_t compute) {
  return gemm_math(a, handle && tf32_compute(compute, *handle_of(handle)));
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasHandle_t>(new Handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle_of(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  return set(handle, &Handle::stream, streamId);
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  return get(handle, &Handle::stream, streamId);
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace, size_t workspaceSizeInBytes) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!workspace && workspaceSizeInBytes > 0) return CUBLAS_STATUS_INVALID_VALUE;
  handle_of(handle)->workspace = workspace;
  handle_of(handle)->workspace_bytes = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) { return set(handle, &Handle::math, mode); }

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) { return get(handle, &Handle::math, mode); }

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  return set(handle, &Handle::pointers, mode);
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t* mode) {
  return get(handle, &Handle::pointers, mode);
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float*, const float*, int, const float*, int, const float*, float*, int) {
  return run(handle, transa, transb, m, n, k, 1, fp32_math(handle));
}
cublasStatus_t cublasSgemm_v2_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                                 int64_t n, int64_t k, const float*, const float*, int64_t, const float*, int64_t,
                                 const float*, float*, int64_t) {
  return run(handle, transa, transb, m, n, k, 1, fp32_math(handle));
}

cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const double*, const double*, int, const double*, int, const double*, double*,
                              int) {
  return run(handle, transa, transb, m, n, k, 1, GemmMath::Fp64);
}

cublasStatus_t cublasSgemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                             int k, const float*, const void*, cudaDataType Atype, int, const void*, cudaDataType, int,
                             const float*, void*, cudaDataType, int) {
  return run(handle, transa, transb, m, n, k, 1, ex_math(handle, Atype, CUBLAS_COMPUTE_32F));
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void*, const void*, cudaDataType Atype, int, const void*, cudaDataType, int,
                            const void*, void*, cudaDataType, int, cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return run(handle, transa, transb, m, n, k, 1, ex_math(handle, Atype, computeType));
}
cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                               int64_t n, int64_t k, const void*, const void*, cudaDataType Atype, int64_t, const void*,
                               cudaDataType, int64_t, const void*, void*, cudaDataType, int64_t,
                               cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return run(handle, transa, transb, m, n, k, 1, ex_math(handle, Atype, computeType));
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float*, const float*, int, long long int,
                                         const float*, int, long long int, const float*, float*, int, long long int,
                                         int batchCount) {
  return run(handle, transa, transb, m, n, k, batchCount, fp32_math(handle));
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void*, const void*, cudaDataType Atype, int,
                                          long long int, const void*, cudaDataType, int, long long int, const void*,
                                          void*, cudaDataType, int, long long int, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t) {
  return run(handle, transa, transb, m, n, k, batchCount, ex_math(handle, Atype, computeType));
}

}  // extern "C"
