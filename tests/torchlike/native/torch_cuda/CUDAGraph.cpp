// Mirrors aten/src/ATen/cuda/CUDAGraph.cpp: capture on the current (side) stream, instantiate at
// capture_end, launch on the current stream at replay.
#include "torchlike/cuda_event.h"

namespace at::cuda {

CUDAGraph::~CUDAGraph() {
  if (graph_exec_) (void)cudaGraphExecDestroy(graph_exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
}

TORCHLIKE_FRAME void CUDAGraph::capture_begin(cudaStreamCaptureMode capture_mode) {
  capture_stream_ = getCurrentCUDAStream().stream();
  TORCH_CHECK(
      capture_stream_ != nullptr,
      "CUDA graphs must be captured on a non-default stream. (However, after capture, it's ok to replay them on "
      "the default stream.)");
  C10_CUDA_CHECK(cudaStreamBeginCapture(capture_stream_, capture_mode));
}

TORCHLIKE_FRAME void CUDAGraph::capture_end() {
  TORCH_CHECK(getCurrentCUDAStream().stream() == capture_stream_, "Capture must end on the same stream it began on.");
  C10_CUDA_CHECK(cudaStreamEndCapture(capture_stream_, &graph_));
  TORCH_CHECK(graph_ != nullptr, "Invalid capture.");
  C10_CUDA_CHECK(cudaGraphInstantiateWithFlags(&graph_exec_, graph_, cudaGraphInstantiateFlagAutoFreeOnLaunch));
}

TORCHLIKE_FRAME void CUDAGraph::replay() {
  TORCH_CHECK(graph_exec_ != nullptr, "Called CUDAGraph::replay without a preceding successful capture.");
  C10_CUDA_CHECK(cudaGraphLaunch(graph_exec_, getCurrentCUDAStream().stream()));
}

}  // namespace at::cuda
