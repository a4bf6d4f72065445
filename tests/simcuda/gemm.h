// A GEMM on the simulated device, shared by the simulated cuBLAS (cublas.cpp) and cuBLASLt
// (cublaslt.cpp): a kernel named as the real libraries name theirs on Hopper, enqueued on the
// caller's stream for a time derived from its size. Nothing is computed.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstdint>

namespace simcuda {

enum class GemmMath { Fp32, Tf32, Bf16, Fp16, Fp64 };

// The math a GEMM of these element and compute types runs in (cuBLAS's rules: FP32 elements in
// TF32 when the compute type or the handle's math mode allows it).
GemmMath gemm_math(cudaDataType_t elements, bool tf32_allowed);

struct Gemm {
  GemmMath math = GemmMath::Fp32;
  bool transa = false, transb = false;
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  bool bias = false;  // cuBLASLt's bias epilogue
};

// Enqueues the GEMM's kernel on the stream, as both libraries answer: CUBLAS_STATUS_INVALID_VALUE
// for a negative size, CUBLAS_STATUS_EXECUTION_FAILED where the runtime refuses the launch.
cublasStatus_t enqueue_gemm(cudaStream_t stream, const Gemm& gemm);

}  // namespace simcuda
