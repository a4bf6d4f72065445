// Mirrors aten/src/ATen/cuda/CUDAEvent.h: a header-only class, so its methods are folded into
// the bindings that call them (THCPEvent_synchronize shows no CUDAEvent frame in real stacks).
#pragma once

#include "torchlike/c10_cuda.h"

namespace at::cuda {

struct CUDAEvent {
  unsigned int flags_ = cudaEventDisableTiming;
  bool is_created_ = false;
  cudaEvent_t event_ = nullptr;

  ~CUDAEvent() {
    if (is_created_) (void)cudaEventDestroy(event_);
  }
  __attribute__((always_inline)) void record(const CUDAStream& stream) {
    if (!is_created_) {
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags_));
      is_created_ = true;
    }
    C10_CUDA_CHECK(cudaEventRecord(event_, stream.stream()));
  }
  __attribute__((always_inline)) bool query() const {
    if (!is_created_) return true;
    const cudaError_t err = cudaEventQuery(event_);
    if (err == cudaSuccess) return true;
    if (err != cudaErrorNotReady) C10_CUDA_CHECK(err);
    (void)cudaGetLastError();
    return false;
  }
  __attribute__((always_inline)) void synchronize() const {
    if (is_created_) C10_CUDA_CHECK(cudaEventSynchronize(event_));
  }
  __attribute__((always_inline)) void block(const CUDAStream& stream) {
    if (is_created_) C10_CUDA_CHECK(cudaStreamWaitEvent(stream.stream(), event_, 0));
  }
};

// Mirrors aten/src/ATen/cuda/CUDAGraph.h (the class is exported from libtorch_cuda).
struct TORCH_CUDA_CPP_API CUDAGraph {
  ~CUDAGraph();
  void capture_begin(cudaStreamCaptureMode capture_mode);
  void capture_end();
  void replay();

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  cudaStream_t capture_stream_ = nullptr;
};

}  // namespace at::cuda
