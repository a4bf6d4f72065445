// A training loop of STEPS steps, each exactly 1,000 hooked calls in the mix of a data-parallel
// job, for scripts/bench/storage (database bytes per rank per step). Runs on simcuda as one rank
// of a one-rank NCCL job, under `trainshim run`. Per step:
//   8 pinned host-to-device copies (the batch, non_blocking=True)
//   920 device-to-device copies (the model's tensor copies)
//   40 cudaStreamQuery polls (torch's Event.query / work.is_completed loops)
//   25 ncclAllReduce (DDP's gradient buckets)
//   2 device-to-pinned-host copies (metrics moved with non_blocking=True)
//   2 x (pageable device-to-host copy + cudaStreamSynchronize): loss.item(), grad-norm.item()
//   1 cudaDeviceSynchronize (the step's end, as torch.cuda.synchronize() before logging)
// Steps are paced at STEP_US microseconds, as a job whose GPU work takes that long.
// Usage: storage_steps STEPS [STEP_US]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "rank_check.h"
#include "simcuda.h"

namespace {

constexpr int kInputCopies = 8, kModelCopies = 920, kPolls = 40, kBuckets = 25, kMetricCopies = 2, kItems = 2;
static_assert(kInputCopies + kModelCopies + kPolls + kBuckets + kMetricCopies + kItems * 2 + 1 == 1000);

struct Buffers {
  char* pinned = nullptr;
  char* device = nullptr;
  char* gradients = nullptr;
  float scalar = 0;
};

void load_batch(const Buffers& b, cudaStream_t s) {
  for (int i = 0; i < kInputCopies; ++i)
    CUDA(cudaMemcpyAsync(b.device + i * 4096, b.pinned + i * 4096, 4096, cudaMemcpyHostToDevice, s));
}

void forward_backward(const Buffers& b, cudaStream_t s) {
  CUDA(simcudaBusy(s, 200));
  for (int i = 0; i < kModelCopies; ++i)
    CUDA(cudaMemcpyAsync(b.device + 65536 + (i % 64) * 256, b.device + (i % 32) * 256, 256, cudaMemcpyDeviceToDevice,
                         s));
}

void all_reduce_buckets(const Buffers& b, ncclComm_t comm, cudaStream_t s) {
  for (int i = 0; i < kBuckets; ++i)
    NCCL(ncclAllReduce(b.gradients + i * 1024, b.gradients + i * 1024, 256, ncclFloat32, ncclSum, comm, s));
}

void wait_for_buckets(cudaStream_t s) {
  for (int i = 0; i < kPolls; ++i) {
    const cudaError_t state = cudaStreamQuery(s);
    CHECK(state == cudaSuccess || state == cudaErrorNotReady);
  }
}

float item(const Buffers& b, cudaStream_t s, int offset) {
  float value = 0;
  CUDA(cudaMemcpyAsync(&value, b.device + offset, sizeof value, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  return value;
}

void log_metrics(const Buffers& b, cudaStream_t s) {
  for (int i = 0; i < kMetricCopies; ++i)
    CUDA(cudaMemcpyAsync(b.pinned + 65536 + i * 64, b.device + i * 64, 64, cudaMemcpyDeviceToHost, s));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s STEPS [STEP_US]\n", argv[0]);
    return 2;
  }
  const int steps = std::atoi(argv[1]);
  const auto step_time = std::chrono::microseconds(argc > 2 ? std::atoi(argv[2]) : 5000);

  Buffers b;
  CUDA(cudaMallocHost(reinterpret_cast<void**>(&b.pinned), 1 << 17));
  CUDA(cudaMalloc(reinterpret_cast<void**>(&b.device), 1 << 17));
  CUDA(cudaMalloc(reinterpret_cast<void**>(&b.gradients), 1 << 16));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ncclUniqueId id;
  NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm = nullptr;
  NCCL(ncclCommInitRank(&comm, 1, id, 0));

  auto due = std::chrono::steady_clock::now();
  for (int step = 0; step < steps; ++step) {
    load_batch(b, s);
    forward_backward(b, s);
    all_reduce_buckets(b, comm, s);
    wait_for_buckets(s);
    b.scalar += item(b, s, 0);
    b.scalar += item(b, s, 64);
    log_metrics(b, s);
    CUDA(cudaDeviceSynchronize());
    due += step_time;
    std::this_thread::sleep_until(due);
  }
  NCCL(ncclCommDestroy(comm));
  CUDA(cudaStreamDestroy(s));
  CUDA(cudaFree(b.gradients));
  CUDA(cudaFree(b.device));
  CUDA(cudaFreeHost(b.pinned));
  std::printf("steps=%d\n", steps);
  return 0;
}
