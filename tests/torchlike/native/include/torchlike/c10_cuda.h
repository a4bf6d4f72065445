// libc10_cuda.so's interface, reduced: streams (c10/cuda/CUDAStream.h), the sync helpers of
// c10/cuda/CUDAFunctions.h and the caching allocator (c10/cuda/CUDACachingAllocator.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "torchlike/c10.h"

#define C10_CUDA_CHECK(expr)                                                               \
  do {                                                                                     \
    const cudaError_t torchlike_err = (expr);                                              \
    if (torchlike_err != cudaSuccess)                                                      \
      throw ::c10::Error(std::string("CUDA error: ") + cudaGetErrorString(torchlike_err)); \
  } while (0)

namespace c10::cuda {

// c10/cuda/CUDAStream.h: a handle on a stream; the default stream is the legacy null stream.
class C10_CUDA_API CUDAStream {
 public:
  explicit CUDAStream(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t stream() const { return stream_; }
  // Out of line in c10/cuda/CUDAStream.cpp in newer trees (inline in the 2.6 header).
  bool query() const;
  void synchronize() const;
  bool operator==(const CUDAStream& other) const { return stream_ == other.stream_; }

 private:
  cudaStream_t stream_;
};

C10_CUDA_API CUDAStream getCurrentCUDAStream(int device = -1);
C10_CUDA_API CUDAStream getDefaultCUDAStream(int device = -1);
C10_CUDA_API void setCurrentCUDAStream(CUDAStream stream);
C10_CUDA_API CUDAStream getStreamFromPool(bool high_priority = false, int device = -1);

// c10/cuda/CUDAFunctions.cpp (out of line, exported).
C10_CUDA_API void device_synchronize();
C10_CUDA_API void set_device(int device);
C10_CUDA_API int current_device();

// c10/cuda/CUDAFunctions.h: `C10_CUDA_API void __inline__`, so these are folded into their
// callers in a real build and are never frames of their own.
__attribute__((always_inline)) inline void stream_synchronize(cudaStream_t stream) {
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
}
__attribute__((always_inline)) inline void memcpy_and_sync(void* dst, const void* src, int64_t nbytes,
                                                           cudaMemcpyKind kind, cudaStream_t stream) {
  C10_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(nbytes), kind, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
}

// c10/cuda/CUDACachingAllocator.h: the allocator is reached through an interface whose
// implementation (Native::NativeCachingAllocator) is hidden; these wrappers are inline there.
namespace CUDACachingAllocator {
class CUDAAllocator {
 public:
  virtual ~CUDAAllocator() = default;
  virtual void* raw_alloc_with_stream(std::size_t nbytes, cudaStream_t stream) = 0;
  virtual void raw_delete(void* ptr) = 0;
  virtual void recordStream(void* ptr, CUDAStream stream) = 0;
  virtual void emptyCache() = 0;
};
C10_CUDA_API CUDAAllocator* get();
inline void* raw_alloc_with_stream(std::size_t nbytes, cudaStream_t stream) {
  return get()->raw_alloc_with_stream(nbytes, stream);
}
inline void raw_delete(void* ptr) { get()->raw_delete(ptr); }
inline void recordStream(void* ptr, CUDAStream stream) { get()->recordStream(ptr, stream); }
inline void emptyCache() { get()->emptyCache(); }
}  // namespace CUDACachingAllocator

}  // namespace c10::cuda

namespace at::cuda {
using c10::cuda::CUDAStream;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::memcpy_and_sync;
}  // namespace at::cuda
