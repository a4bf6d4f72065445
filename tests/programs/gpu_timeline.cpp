// Known GPU work on simcuda, for the GPU timeline's tests (tests/integration/test_gpu_timeline.cpp):
//   gpu_timeline_prog work        one stream: a 4096-byte pinned h2d copy, 3 launches of matmul, 2 of
//                                 relu, a 1024-byte memset, a 2048-byte d2h copy into pageable memory,
//                                 a stream sync; prints the clock before and after ("window B E")
//   gpu_timeline_prog launches    launches around host syncs; prints each launch that follows a sync
//                                 on its thread ("first API FUNCTION STREAM")
//   gpu_timeline_prog duty        1 launch, a sync, 600 ms asleep, 1 launch, a sync
// Every kernel runs 100 us on the stream's worker; the first hooked call is cudaMallocHost. The
// program does not link libcupti: the shim loads the one on the library path.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "check.hpp"
#include "simcuda.h"
#include "trainshim/clock.hpp"

namespace {

constexpr unsigned long long kKernelNs = 100'000;
dim3 one{1, 1, 1};

struct Kernels {
  const void* matmul = nullptr;
  const void* relu = nullptr;
};

Kernels register_kernels() {
  Kernels k;
  CHECK(simcudaRegisterKernel("_Z6matmulPfS_S_", kKernelNs, &k.matmul));
  CHECK(simcudaRegisterKernel("_Z4reluPf", kKernelNs, &k.relu));
  return k;
}

void launch(const void* kernel, cudaStream_t stream) { CHECK(cudaLaunchKernel(kernel, one, one, nullptr, 0, stream)); }

void print_first(const char* api, const void* kernel, cudaStream_t stream) {
  std::printf("first %s %" PRIuPTR " %" PRIuPTR "\n", api, reinterpret_cast<uintptr_t>(kernel),
              reinterpret_cast<uintptr_t>(stream));
}

int work(const Kernels& k, cudaStream_t stream, void* device) {
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 4096));
  char* pageable = static_cast<char*>(std::malloc(2048));
  const uint64_t begin = trainshim::ticks();
  CHECK(cudaMemcpyAsync(device, pinned, 4096, cudaMemcpyHostToDevice, stream));
  for (int i = 0; i < 3; ++i) launch(k.matmul, stream);
  for (int i = 0; i < 2; ++i) launch(k.relu, stream);
  CHECK(cudaMemsetAsync(device, 0, 1024, stream));
  CHECK(cudaMemcpyAsync(pageable, device, 2048, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  std::printf("window %" PRIu64 " %" PRIu64 "\n", begin, trainshim::ticks());
  std::free(pageable);
  return 0;
}

int launches(const Kernels& k, cudaStream_t stream, void* device) {
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 64));
  for (int i = 0; i < 3; ++i) launch(k.matmul, stream);  // no sync before: none recorded
  CHECK(cudaStreamSynchronize(stream));
  print_first("cudaLaunchKernel", k.relu, stream);
  launch(k.relu, stream);
  launch(k.matmul, stream);
  launch(k.matmul, stream);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaStreamSynchronize(stream));  // two syncs, one launch after them
  print_first("cudaLaunchKernel", k.matmul, stream);
  launch(k.matmul, stream);
  CHECK(cudaMemcpy(pinned, device, 64, cudaMemcpyDeviceToHost));  // a synchronous copy waits too
  cudaLaunchConfig_t config{};
  config.gridDim = one;
  config.blockDim = one;
  config.stream = stream;
  print_first("cudaLaunchKernelExC", k.relu, stream);
  CHECK(cudaLaunchKernelExC(&config, k.relu, nullptr));
  // A sync on another thread: this thread's next launch is not the first after it.
  std::thread([stream] { CHECK(cudaStreamSynchronize(stream)); }).join();
  launch(k.relu, stream);
  CHECK(cudaMemcpyAsync(device, pinned, 64, cudaMemcpyHostToDevice, stream));  // asynchronous: no wait
  launch(k.relu, stream);
  return 0;
}

int duty(const Kernels& k, cudaStream_t stream) {
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, 64));
  launch(k.matmul, stream);
  CHECK(cudaStreamSynchronize(stream));
  usleep(600'000);
  launch(k.relu, stream);
  CHECK(cudaStreamSynchronize(stream));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc == 2 ? argv[1] : "";
  const Kernels k = register_kernels();
  cudaStream_t stream = nullptr;
  void* device = nullptr;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMalloc(&device, 1 << 16));
  if (mode == "work") return work(k, stream, device);
  if (mode == "launches") return launches(k, stream, device);
  if (mode == "duty") return duty(k, stream);
  std::fprintf(stderr, "usage: %s work|launches|duty\n", argv[0]);
  return 2;
}
