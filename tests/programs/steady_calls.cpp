// A job that makes an exact number of hooked calls from known sites, spread over time, so that a
// test can kill its collector mid-run:
//   steady_calls ITERATIONS PAUSE_US
// Each iteration: two cudaMemcpyAsync (h2d, then d2h, pinned), one cudaStreamSynchronize and one
// cudaStreamQuery on one stream, then a pause. Besides: one cudaStreamCreate, one cudaMallocHost,
// one cudaMalloc, and their cudaFree / cudaFreeHost / cudaStreamDestroy at the end.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ITERATIONS PAUSE_US\n", argv[0]);
    return 2;
  }
  const int iterations = std::atoi(argv[1]);
  const int pause_us = std::atoi(argv[2]);
  cudaStream_t stream = nullptr;
  void* host = nullptr;
  void* device = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess || cudaMallocHost(&host, 4096) != cudaSuccess ||
      cudaMalloc(&device, 4096) != cudaSuccess)
    return 1;
  for (int i = 0; i < iterations; ++i) {
    if (cudaMemcpyAsync(device, host, 4096, cudaMemcpyHostToDevice, stream) != cudaSuccess) return 1;
    if (cudaMemcpyAsync(host, device, 1024, cudaMemcpyDeviceToHost, stream) != cudaSuccess) return 1;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 1;
    if (cudaStreamQuery(stream) != cudaSuccess) return 1;
    if (pause_us > 0) usleep(pause_us);
  }
  if (cudaFree(device) != cudaSuccess || cudaFreeHost(host) != cudaSuccess || cudaStreamDestroy(stream) != cudaSuccess)
    return 1;
  std::printf("done %d\n", iterations);
  return 0;
}
