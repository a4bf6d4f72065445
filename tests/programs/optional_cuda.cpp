// A program that uses CUDA only when a runtime is linked (weak references, a common optional
// dependency), built twice: without any CUDA library and linked with the runtime. The reliability
// review's §5: without a runtime the shim's exported hooks answer the weak references, and the
// program must still end on its CPU path.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "check.hpp"

#pragma weak cudaFree
#pragma weak cudaMalloc
#pragma weak cudaMemcpy
#pragma weak cudaDeviceSynchronize

int main() {
  if (!cudaFree) {
    std::puts("no CUDA runtime linked: running on CPU");
    return 0;
  }
  // cudaFree(nullptr) sets the runtime up; its answer is read as PyTorch's device_count_impl reads
  // cudaGetDeviceCount's: no device and no driver mean "run on the CPU", anything else is a failure.
  switch (const cudaError_t probe = cudaFree(nullptr)) {
    case cudaSuccess:
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      std::puts("no usable CUDA device: running on CPU");
      return 0;
    default:
      std::printf("CUDA failed: %d\n", int(probe));
      return 1;
  }
  void* device = nullptr;
  char host[256] = {};
  CHECK(cudaMalloc(&device, sizeof host));
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(device));
  std::puts("ran on the GPU");
  return 0;
}
