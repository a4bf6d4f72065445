// host_copies N THREADS: each thread makes N x (cudaMemcpyAsync from pageable memory +
// cudaStreamSynchronize), 2·N·THREADS recorded calls in all. The job of the reliability review's
// §1 (a full /dev/shm killed it with SIGBUS) and of its environment checks.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "check.hpp"

int main(int argc, char** argv) {
  const int calls = argc > 1 ? std::atoi(argv[1]) : 100;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  void* device = nullptr;
  CHECK(cudaMalloc(&device, 4096));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&] {
      cudaStream_t stream;
      CHECK(cudaStreamCreate(&stream));
      char host[64] = {};
      for (int i = 0; i < calls; ++i) {
        CHECK(cudaMemcpyAsync(device, host, sizeof host, cudaMemcpyHostToDevice, stream));
        CHECK(cudaStreamSynchronize(stream));
      }
      CHECK(cudaStreamDestroy(stream));
    });
  for (std::thread& worker : workers) worker.join();
  CHECK(cudaFree(device));
  std::printf("done %d x %d\n", threads, calls);
  return 0;
}
