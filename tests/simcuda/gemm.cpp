// The kernels of simulated GEMMs (gemm.h). Names follow what cuBLAS 12-13 runs on an H100 (seen in
// Nsight and torch.profiler traces): FP32 and TF32 through the xmma kernels
// (sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_..., sm90_xmma_gemm_f32f32_tf32f32_f32_...), BF16 and FP16
// through cuBLASLt's nvjet kernels, whose type letters say the precision (nvjet_tst_: BF16,
// nvjet_hsh_: FP16). An H200 with cuBLAS 13 also ran small FP32 GEMMs as sm80_xmma_..._ffma and
// cutlass_80_simt_sgemm, and BF16 as nvjet_sm90_tst_ (tests/unit/test_kernels.cpp). Durations:
// 2*m*n*k*batch FLOPs at an H100 SXM's dense peak for that math (67 TFLOP/s FP32 on CUDA cores,
// 495 TF32, 989 BF16 and FP16, 67 FP64), 2 us at least.
#include "gemm.h"

#include "simcuda.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace simcuda {

GemmMath gemm_math(cudaDataType_t elements, bool tf32_allowed) {
  switch (elements) {
    case CUDA_R_16BF:
      return GemmMath::Bf16;
    case CUDA_R_16F:
      return GemmMath::Fp16;
    case CUDA_R_64F:
      return GemmMath::Fp64;
    default:
      return tf32_allowed ? GemmMath::Tf32 : GemmMath::Fp32;
  }
}

namespace {

std::string kernel_name(const Gemm& g) {
  std::string layout;
  layout += g.transa ? 't' : 'n';
  layout += g.transb ? 't' : 'n';
  const std::string bias = g.bias ? "_bias" : "";
  switch (g.math) {
    case GemmMath::Bf16:
      return "nvjet_tst_128x256_64x4_2x1_v_bz_coopA" + bias + "_" + layout;
    case GemmMath::Fp16:
      return "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA" + bias + "_" + layout;
    case GemmMath::Tf32:
      return "sm90_xmma_gemm_f32f32_tf32f32_f32_" + layout + "_n_tilesize128x128x32_warpgroupsize1x1x1" + bias +
             "_execute_segment_k_off_kernel__5x_cublas";
    case GemmMath::Fp64:
      return "sm90_xmma_gemm_f64f64_f64f64_f64_" + layout + "_n_tilesize64x64x16_warpgroupsize1x1x1" + bias +
             "_execute_kernel__5x_cublas";
    case GemmMath::Fp32:
      break;
  }
  return "sm90_xmma_gemm_f32f32_f32f32_f32_" + layout + "_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma" + bias +
         "_aligna4_alignc4_execute_kernel__5x_cublas";
}

double flops_per_ns(GemmMath math) {
  switch (math) {
    case GemmMath::Tf32:
      return 495e3;
    case GemmMath::Bf16:
    case GemmMath::Fp16:
      return 989e3;
    case GemmMath::Fp32:
    case GemmMath::Fp64:
      break;
  }
  return 67e3;
}

void run_for(void* nanoseconds) { simcudaRunFor(reinterpret_cast<std::uintptr_t>(nanoseconds)); }

}  // namespace

cublasStatus_t enqueue_gemm(cudaStream_t stream, const Gemm& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;  // nothing to write: cuBLAS launches nothing
  const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k) *
                       static_cast<double>(g.batch);
  const auto ns = static_cast<std::uintptr_t>(std::max(2000.0, flops / flops_per_ns(g.math)));
  return simcudaEnqueueKernel(stream, kernel_name(g).c_str(), run_for, reinterpret_cast<void*>(ns)) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace simcuda
