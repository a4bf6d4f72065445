// Stream capture and CUDA graphs, as stubs: capture is accepted and work runs when enqueued
// (it is not deferred to the replay), a graph is an opaque handle and launching it does
// nothing. Enough for programs that capture and replay (torch.cuda.CUDAGraph) to run; the
// capture semantics themselves are not simulated.
#include "internal.h"

namespace {
struct StubGraph {};
}  // namespace

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  (void)mode;
  return simcuda::resolveStream(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!simcuda::resolveStream(stream)) return cudaErrorInvalidResourceHandle;
  if (!pGraph) return cudaErrorInvalidValue;
  *pGraph = reinterpret_cast<cudaGraph_t>(new StubGraph);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags) {
  (void)flags;
  if (!pGraphExec || !graph) return cudaErrorInvalidValue;
  *pGraphExec = reinterpret_cast<cudaGraphExec_t>(new StubGraph);
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  if (!graphExec) return cudaErrorInvalidValue;
  return simcuda::resolveStream(stream) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  delete reinterpret_cast<StubGraph*>(graphExec);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<StubGraph*>(graph);
  return cudaSuccess;
}

}  // extern "C"
