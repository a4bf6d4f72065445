// Mirrors c10/cuda/CUDAStream.cpp: a thread-local current stream per device, the default stream
// is the legacy null stream, pool streams are created lazily as non-blocking streams.
#include <array>
#include <atomic>
#include <mutex>

#include "torchlike/c10_cuda.h"

namespace c10::cuda {
namespace {

constexpr int kStreamsPerPool = 4;  // the real pool has 32 per priority, handed out round-robin
thread_local cudaStream_t current_stream = nullptr;

// Mirrors initDeviceStreamState: the pool's streams are created once, non-blocking.
std::array<cudaStream_t, kStreamsPerPool>& pool_streams() {
  static std::array<cudaStream_t, kStreamsPerPool> streams{};
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto& s : streams) C10_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, 0));
  });
  return streams;
}

}  // namespace

// Mirrors CUDAStream::query (CUDAStream.h / .cpp).
bool CUDAStream::query() const {
  const cudaError_t err = cudaStreamQuery(stream_);
  if (err == cudaSuccess) return true;
  if (err != cudaErrorNotReady) C10_CUDA_CHECK(err);
  (void)cudaGetLastError();  // clear the NotReady, as the real query does
  return false;
}

// Mirrors CUDAStream::synchronize: stream_synchronize (inline) on the handle.
void CUDAStream::synchronize() const { stream_synchronize(stream_); }

CUDAStream getDefaultCUDAStream(int) { return CUDAStream(nullptr); }
CUDAStream getCurrentCUDAStream(int) { return CUDAStream(current_stream); }
void setCurrentCUDAStream(CUDAStream stream) { current_stream = stream.stream(); }

// Mirrors getStreamFromPool: round-robin over the lazily created pool.
CUDAStream getStreamFromPool(bool, int) {
  static std::atomic<unsigned> next{0};
  return CUDAStream(pool_streams()[next++ % kStreamsPerPool]);
}

}  // namespace c10::cuda
