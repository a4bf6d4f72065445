// Mirrors c10/cuda/CUDACachingAllocator.cpp, reduced to one device, whole blocks (no splitting)
// and the paths that synchronise: a block used on another stream (recordStream) is kept until
// the events recorded at its free have completed, and emptyCache / an out-of-memory retry
// releases the cache: synchronize_and_free_events (cudaEventSynchronize), then release_block
// (cudaFree).
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "torchlike/c10_cuda.h"

namespace c10::cuda::CUDACachingAllocator::Native {
namespace {

constexpr std::size_t kMinBlockSize = 512;  // round_size: multiples of 512 bytes

struct Block {
  std::size_t size;
  cudaStream_t stream;
  void* ptr;
  bool allocated = false;
  std::set<cudaStream_t> stream_uses;
  int event_count = 0;
};

struct BlockComparator {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

}  // namespace

// Mirrors DeviceCachingAllocator.
class DeviceCachingAllocator {
 public:
  // Mirrors DeviceCachingAllocator::malloc: a cached block of the stream first, then cudaMalloc,
  // then (out of memory) free the cache and try once more.
  TORCHLIKE_FRAME Block* malloc(std::size_t orig_size, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    process_events();
    const std::size_t size = round_size(orig_size);
    Block key{size, stream, nullptr, false, {}, 0};
    auto it = free_blocks_.lower_bound(&key);
    Block* block = nullptr;
    if (it != free_blocks_.end() && (*it)->stream == stream) {
      block = *it;
      free_blocks_.erase(it);
    } else {
      void* ptr = nullptr;
      if (cudaMalloc(&ptr, size) != cudaSuccess) {
        (void)cudaGetLastError();
        release_cached_blocks();
        C10_CUDA_CHECK(cudaMalloc(&ptr, size));
      }
      block = new Block{size, stream, ptr, false, {}, 0};
    }
    block->allocated = true;
    active_.emplace(block->ptr, block);
    return block;
  }

  // Mirrors DeviceCachingAllocator::free: a block used on other streams waits for events.
  TORCHLIKE_FRAME void free(Block* block) {
    std::lock_guard lock(mutex_);
    block->allocated = false;
    if (!block->stream_uses.empty()) {
      insert_events(block);
    } else {
      free_block(block);
    }
  }

  Block* find_allocated(void* ptr) {
    std::lock_guard lock(mutex_);
    auto it = active_.find(ptr);
    return it == active_.end() ? nullptr : it->second;
  }

  void record_stream(Block* block, cudaStream_t stream) {
    std::lock_guard lock(mutex_);
    if (stream != block->stream) block->stream_uses.insert(stream);
  }

  // Mirrors DeviceCachingAllocator::emptyCache.
  TORCHLIKE_FRAME void emptyCache() {
    std::lock_guard lock(mutex_);
    release_cached_blocks();
  }

 private:
  static std::size_t round_size(std::size_t size) {
    return size < kMinBlockSize ? kMinBlockSize : kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
  }

  void free_block(Block* block) {
    active_.erase(block->ptr);
    free_blocks_.insert(block);
  }

  // Mirrors insert_events: one event per stream that used the block.
  void insert_events(Block* block) {
    for (cudaStream_t stream : block->stream_uses) {
      cudaEvent_t event = nullptr;
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      C10_CUDA_CHECK(cudaEventRecord(event, stream));
      ++block->event_count;
      cuda_events_[stream].emplace_back(event, block);
    }
    block->stream_uses.clear();
  }

  // Mirrors process_events: blocks whose events have completed go back to the pool.
  void process_events() {
    for (auto& [stream, events] : cuda_events_) {
      while (!events.empty()) {
        auto [event, block] = events.front();
        const cudaError_t err = cudaEventQuery(event);
        if (err == cudaErrorNotReady) {
          (void)cudaGetLastError();
          break;
        }
        C10_CUDA_CHECK(err);
        C10_CUDA_CHECK(cudaEventDestroy(event));
        events.erase(events.begin());
        if (--block->event_count == 0) free_block(block);
      }
    }
  }

  // Mirrors synchronize_and_free_events: waits for every outstanding event.
  TORCHLIKE_FRAME void synchronize_and_free_events() {
    for (auto& [stream, events] : cuda_events_) {
      for (auto [event, block] : events) {
        C10_CUDA_CHECK(cudaEventSynchronize(event));
        C10_CUDA_CHECK(cudaEventDestroy(event));
        if (--block->event_count == 0) free_block(block);
      }
    }
    cuda_events_.clear();
  }

  // Mirrors release_block.
  TORCHLIKE_FRAME void release_block(Block* block) {
    C10_CUDA_CHECK(cudaFree(block->ptr));
    delete block;
  }

  // Mirrors release_cached_blocks: events first, then every free block.
  TORCHLIKE_FRAME void release_cached_blocks() {
    synchronize_and_free_events();
    for (Block* block : free_blocks_) release_block(block);
    free_blocks_.clear();
  }

  std::recursive_mutex mutex_;
  std::set<Block*, BlockComparator> free_blocks_;
  std::unordered_map<void*, Block*> active_;
  std::map<cudaStream_t, std::vector<std::pair<cudaEvent_t, Block*>>> cuda_events_;
};

// Mirrors NativeCachingAllocator (one device here).
class NativeCachingAllocator final : public CUDAAllocator {
 public:
  void* raw_alloc_with_stream(std::size_t nbytes, cudaStream_t stream) override {
    if (nbytes == 0) return nullptr;
    return device_allocator_.malloc(nbytes, stream)->ptr;
  }
  void raw_delete(void* ptr) override {
    if (!ptr) return;
    if (Block* block = device_allocator_.find_allocated(ptr)) device_allocator_.free(block);
  }
  void recordStream(void* ptr, CUDAStream stream) override {
    if (Block* block = device_allocator_.find_allocated(ptr)) device_allocator_.record_stream(block, stream.stream());
  }
  TORCHLIKE_FRAME void emptyCache() override { device_allocator_.emptyCache(); }

 private:
  DeviceCachingAllocator device_allocator_;
};

}  // namespace c10::cuda::CUDACachingAllocator::Native

namespace c10::cuda::CUDACachingAllocator {

// Mirrors the allocator() singleton behind get(); leaked, as blocks may be freed at exit.
CUDAAllocator* get() {
  static CUDAAllocator* allocator = new Native::NativeCachingAllocator;
  return allocator;
}

}  // namespace c10::cuda::CUDACachingAllocator
