// A libcudart.so.13 whose functions return at once: the benchmark's un-hooked baseline costs a
// call and nothing else, so the difference to the hooked call is the shim's own cost.
#include <cuda_runtime_api.h>

extern "C" {
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaHostRegister(void*, size_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void*) {
  attributes->type = cudaMemoryTypeUnregistered;
  return cudaSuccess;
}
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
}
