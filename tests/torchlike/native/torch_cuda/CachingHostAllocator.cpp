// Mirrors aten/src/ATen/cuda/CachingHostAllocator.cpp over ATen/core/CachingHostAllocator.h
// (CachingHostAllocatorImpl): pinned blocks rounded up to a power of two, cached and reused;
// allocate_host_memory uses cudaHostAlloc, or malloc + cudaHostRegister when
// PYTORCH_CUDA_ALLOC_CONF has pinned_use_cuda_host_register:True (allocWithCudaHostRegister).
// A block used by an asynchronous copy (record_event) is reused only once the events recorded
// at its free have completed (process_events, cudaEventQuery).
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "cuda_native.h"

namespace at::cuda {
namespace {

struct HostBlock {
  std::size_t size;
  void* ptr;
  bool allocated = false;
  int event_count = 0;
  std::set<cudaStream_t> streams;
};

// Mirrors CUDAAllocatorConfig::pinned_use_cuda_host_register.
bool pinned_use_cuda_host_register() {
  static const bool enabled = [] {
    const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
    return conf && std::strstr(conf, "pinned_use_cuda_host_register:True") != nullptr;
  }();
  return enabled;
}

std::size_t PowerOf2Ceil(std::size_t n) {
  std::size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

class CUDACachingHostAllocatorImpl {
 public:
  // Mirrors CachingHostAllocatorImpl::allocate.
  TORCHLIKE_FRAME HostBlock* allocate(std::size_t size) {
    std::lock_guard lock(mutex_);
    process_events();
    const std::size_t roundSize = PowerOf2Ceil(size ? size : 1);
    auto it = free_list_.lower_bound(roundSize);
    if (it != free_list_.end() && it->first == roundSize) {
      HostBlock* block = it->second;
      free_list_.erase(it);
      block->allocated = true;
      return block;
    }
    void* ptr = nullptr;
    allocate_host_memory(roundSize, &ptr);
    auto* block = new HostBlock{roundSize, ptr, false, 0, {}};
    block->allocated = true;
    blocks_.emplace(ptr, block);
    return block;
  }

  // Mirrors CachingHostAllocatorImpl::free: events on the streams that used the block.
  TORCHLIKE_FRAME void free(HostBlock* block) {
    std::lock_guard lock(mutex_);
    block->allocated = false;
    if (block->streams.empty()) {
      free_list_.emplace(block->size, block);
      return;
    }
    for (cudaStream_t stream : block->streams) {
      cudaEvent_t event = nullptr;
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      C10_CUDA_CHECK(cudaEventRecord(event, stream));
      ++block->event_count;
      events_.emplace_back(event, block);
    }
    block->streams.clear();
  }

  // Mirrors CachingHostAllocatorImpl::record_event.
  void record_event(void* ptr, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    auto it = blocks_.upper_bound(ptr);
    if (it == blocks_.begin()) return;
    --it;
    HostBlock* block = it->second;
    if (static_cast<char*>(ptr) < static_cast<char*>(block->ptr) + block->size) block->streams.insert(stream);
  }

 private:
  // Mirrors CUDACachingHostAllocatorImpl::allocate_host_memory.
  TORCHLIKE_FRAME void allocate_host_memory(std::size_t size, void** ptr) {
    if (pinned_use_cuda_host_register()) {
      allocWithCudaHostRegister(ptr, size);
    } else {
      C10_CUDA_CHECK(cudaHostAlloc(ptr, size, cudaHostAllocDefault));
    }
  }

  // Mirrors allocWithCudaHostRegister: pageable memory, then registered.
  TORCHLIKE_FRAME void allocWithCudaHostRegister(void** ptr, std::size_t size) {
    *ptr = std::malloc(size);
    TORCH_CHECK(*ptr != nullptr, "malloc failed");
    C10_CUDA_CHECK(cudaHostRegister(*ptr, size, cudaHostRegisterDefault));
  }

  // Mirrors CachingHostAllocatorImpl::process_events.
  void process_events() {
    while (!events_.empty()) {
      auto [event, block] = events_.front();
      const cudaError_t err = cudaEventQuery(event);
      if (err == cudaErrorNotReady) {
        (void)cudaGetLastError();
        break;
      }
      C10_CUDA_CHECK(err);
      C10_CUDA_CHECK(cudaEventDestroy(event));
      events_.pop_front();
      if (--block->event_count == 0) free_list_.emplace(block->size, block);
    }
  }

  std::mutex mutex_;
  std::map<void*, HostBlock*> blocks_;
  std::multimap<std::size_t, HostBlock*> free_list_;
  std::deque<std::pair<cudaEvent_t, HostBlock*>> events_;
};

CUDACachingHostAllocatorImpl& getCUDAHostAllocator() {
  static auto* impl = new CUDACachingHostAllocatorImpl;  // leaked: pinned tensors may die at exit
  return *impl;
}

}  // namespace

namespace CachingHostAllocator {

std::shared_ptr<StorageImpl> allocate(std::size_t nbytes) {
  lazyInitCUDA();
  HostBlock* block = getCUDAHostAllocator().allocate(nbytes);
  auto storage = std::make_shared<StorageImpl>();
  storage->data = block->ptr;
  storage->nbytes = nbytes;
  storage->pinned = true;
  storage->deleter = [block](void*) { getCUDAHostAllocator().free(block); };
  return storage;
}

void recordEvent(void* ptr, CUDAStream stream) { getCUDAHostAllocator().record_event(ptr, stream.stream()); }

}  // namespace CachingHostAllocator
}  // namespace at::cuda
