// The simulated cuBLASLt (libcublasLt.so.13): the descriptors PyTorch's Lt path builds
// (at::cuda::blas::gemm_and_bias and bgemm_internal_cublaslt in aten/src/ATen/cuda/CUDABlas.cpp:
// a matmul descriptor with its transposes and epilogue, three or four layouts, a preference with
// the workspace limit), a heuristic that offers one algorithm needing no workspace, and
// cublasLtMatmul, which runs the GEMM as a simulated kernel (gemm.h). PyTorch passes its cuBLAS
// handle or its own Lt handle; neither is read here. Everything else is a generated stub.
#include <cublasLt.h>

#include <cstring>

#include "gemm.h"

using namespace simcuda;

namespace {

struct MatmulDesc {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
};

struct Layout {
  cudaDataType type = CUDA_R_32F;
  std::uint64_t rows = 0, cols = 0;
  std::int32_t batch = 1;
};

struct Preference {};

template <class T>
T* of(void* p) {
  return static_cast<T*>(p);
}

// Copies an attribute of exactly the size cuBLASLt stores, as it checks.
template <class T>
bool read(T& out, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return false;
  std::memcpy(&out, buf, sizeof(T));
  return true;
}

bool has_bias(cublasLtEpilogue_t e) { return (e & CUBLASLT_EPILOGUE_BIAS) != 0; }

}  // namespace

extern "C" {

size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  static char lt;  // one process-wide handle: it holds nothing
  *handle = reinterpret_cast<cublasLtHandle_t>(&lt);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t) {
  if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new MatmulDesc;
  d->compute = computeType;
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  delete of<MatmulDesc>(matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

// The attributes a GEMM's kernel depends on are kept; the others (pointers, scales, the bias's
// type) are accepted as they are.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  if (!matmulDesc || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc& d = *of<MatmulDesc>(matmulDesc);
  bool ok = true;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      ok = read(d.compute, buf, sizeInBytes);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = read(d.transa, buf, sizeInBytes);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = read(d.transb, buf, sizeInBytes);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      ok = read(d.epilogue, buf, sizeInBytes);
      break;
    default:
      break;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!matLayout || ld < 0) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new Layout;
  l->type = type, l->rows = rows, l->cols = cols;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  delete of<Layout>(matLayout);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  if (!matLayout || !buf) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && !read(of<Layout>(matLayout)->batch, buf, sizeInBytes))
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete of<Preference>(pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t, const void* buf, size_t) {
  return pref && buf ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// One algorithm for every problem, needing no workspace: PyTorch fails with "No algorithm found"
// when none is returned, and checks that its workspace is large enough.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (!operationDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc || !preference || requestedAlgoCount < 1 ||
      !heuristicResultsArray || !returnAlgoCount)
    return CUBLAS_STATUS_INVALID_VALUE;
  heuristicResultsArray[0] = cublasLtMatmulHeuristicResult_t{};
  heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
  heuristicResultsArray[0].wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// D = op(A) op(B): m and n are D's rows and columns, k the inner size (A's, after its transpose).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void*, const void*,
                              cublasLtMatrixLayout_t Adesc, const void*, cublasLtMatrixLayout_t Bdesc, const void*,
                              const void*, cublasLtMatrixLayout_t Cdesc, void*, cublasLtMatrixLayout_t Ddesc,
                              const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t stream) {
  if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!computeDesc || !Adesc || !Bdesc || !Cdesc || !Ddesc) return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc& d = *of<MatmulDesc>(computeDesc);
  const Layout& a = *of<Layout>(Adesc);
  const Layout& out = *of<Layout>(Ddesc);
  Gemm g;
  g.math = gemm_math(a.type, d.compute == CUBLAS_COMPUTE_32F_FAST_TF32);
  g.transa = d.transa != CUBLAS_OP_N, g.transb = d.transb != CUBLAS_OP_N;
  g.m = static_cast<std::int64_t>(out.rows);
  g.n = static_cast<std::int64_t>(out.cols);
  g.k = static_cast<std::int64_t>(g.transa ? a.rows : a.cols);
  g.batch = out.batch;
  g.bias = has_bias(d.epilogue);
  return enqueue_gemm(stream, g);
}

}  // extern "C"
