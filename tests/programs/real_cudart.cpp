// Linked against the real libcudart.so.13. Without a driver every call fails with
// cudaErrorInsufficientDriver (35); the shim must still record each call with that result.
#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  char host[64] = {};
  int failures = 0;
  for (int i = 0; i < 4; ++i) failures += cudaMemcpy(host, host + 32, 32, cudaMemcpyHostToDevice) != cudaSuccess;
  failures += cudaStreamSynchronize(nullptr) != cudaSuccess;
  failures += cudaDeviceSynchronize() != cudaSuccess;
  std::printf("failed calls: %d\n", failures);
  return 0;
}
