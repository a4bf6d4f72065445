// A program with a CUPTI client of its own, as torch.profiler is one through Kineto
// (CuptiActivityApi::enableCuptiActivities), linked against libcupti.so.13 and calling it through
// the PLT: 2 launches of matmul and a sync, then its client (subscribe, buffers, kernels on), 1
// launch of relu, a sync and a forced flush; prints "own kernels N", the kernel records its client
// got. The first hooked call is cudaMallocHost. `gpu_client_prog finalize`: after the 2 matmuls,
// cuptiFinalize (a library tearing CUPTI down between sessions), then the relu; prints "finalized".
#include <cuda_runtime_api.h>
#include <cupti.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "check.hpp"
#include "simcuda.h"

namespace {

dim3 one{1, 1, 1};
std::atomic<int> g_own_kernels{0};
alignas(8) uint8_t g_own_buffer[1 << 16];

void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = g_own_buffer;
  *size = sizeof g_own_buffer;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS)
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) ++g_own_kernels;
}

}  // namespace

int main(int argc, char** argv) {
  const bool finalize = argc > 1 && std::string(argv[1]) == "finalize";
  const void* matmul = nullptr;
  const void* relu = nullptr;
  CHECK(simcudaRegisterKernel("_Z6matmulPfS_S_", 100'000, &matmul));
  CHECK(simcudaRegisterKernel("_Z4reluPf", 100'000, &relu));
  cudaStream_t stream = nullptr;
  void* pinned = nullptr;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMallocHost(&pinned, 64));
  CHECK(cudaLaunchKernel(matmul, one, one, nullptr, 0, stream));
  CHECK(cudaLaunchKernel(matmul, one, one, nullptr, 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  if (finalize) {
    CHECK(cuptiFinalize());
    CHECK(cudaLaunchKernel(relu, one, one, nullptr, 0, stream));
    CHECK(cudaStreamSynchronize(stream));
    std::printf("finalized\n");
    return 0;
  }
  CUpti_SubscriberHandle subscriber = nullptr;
  CHECK(cuptiSubscribe(&subscriber, no_callback, nullptr));
  CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CHECK(cudaLaunchKernel(relu, one, one, nullptr, 0, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  CHECK(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CHECK(cuptiUnsubscribe(subscriber));
  std::printf("own kernels %d\n", g_own_kernels.load());
  return 0;
}
