// A library that links cudart, as a Python extension does. Loaded with RTLD_LOCAL, its cudart is
// not in the global scope, so the shim must find the real functions through cudart's handle.
#include <cuda_runtime_api.h>

extern "C" __attribute__((visibility("default"))) int copy_from_local_scope(int times) {
  void* device = nullptr;
  if (cudaMalloc(&device, 256) != cudaSuccess) return 1;
  char host[256] = {};
  for (int i = 0; i < times; ++i)
    if (cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
  if (cudaStreamSynchronize(nullptr) != cudaSuccess) return 1;
  return cudaFree(device) == cudaSuccess ? 0 : 1;
}
