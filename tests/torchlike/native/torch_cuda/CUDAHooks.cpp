// Mirrors aten/src/ATen/cuda/detail/CUDAHooks.cpp (lazy CUDA init), ATen/cuda/EmptyTensor.cpp
// (empty_cuda from the caching allocator) and the launch of a kernel on the current stream
// (gpu_kernel), simulated by a host function: cudaLaunchHostFunc runs it in stream order.
#include <mutex>
#include <vector>

#include "cuda_native.h"

namespace at::cuda {
namespace {

struct Kernel {
  std::function<void()> body;
};

void run_and_free(void* arg) {
  auto* kernel = static_cast<Kernel*>(arg);
  kernel->body();
  delete kernel;
}
// A kernel captured into a CUDA graph runs at every replay: the graph owns it.
void run_captured(void* arg) { static_cast<Kernel*>(arg)->body(); }

std::vector<Kernel*>& captured_kernels() {
  static auto* kernels = new std::vector<Kernel*>;
  return *kernels;
}

}  // namespace

namespace detail {
// Mirrors initializeCudaContext (ATen/native/cuda/jit_utils.cpp): cudaFree(nullptr) creates the
// primary context, which every later runtime call then finds.
TORCHLIKE_FRAME void initializeCudaContext() { C10_CUDA_CHECK(cudaFree(nullptr)); }

// Mirrors CUDAHooks::init, run once at the first CUDA tensor (Context::lazyInitDevice).
TORCHLIKE_FRAME void CUDAHooks_init() {
  int count = 0;
  C10_CUDA_CHECK(cudaGetDeviceCount(&count));
  TORCH_CHECK(count > 0, "Found no NVIDIA driver on your system.");
  initializeCudaContext();
}
}  // namespace detail

void lazyInitCUDA() {
  static std::once_flag once;
  std::call_once(once, detail::CUDAHooks_init);
}

void launch_kernel(std::function<void()> body) {
  lazyInitCUDA();
  const cudaStream_t stream = getCurrentCUDAStream().stream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  auto* kernel = new Kernel{std::move(body)};
  if (status == cudaStreamCaptureStatusActive) {
    captured_kernels().push_back(kernel);
    C10_CUDA_CHECK(cudaLaunchHostFunc(stream, run_captured, kernel));
  } else {
    C10_CUDA_CHECK(cudaLaunchHostFunc(stream, run_and_free, kernel));
  }
}

// Mirrors at::detail::empty_cuda: memory from the caching allocator on the current stream.
TORCHLIKE_FRAME Tensor empty_cuda(const std::vector<int64_t>& size, ScalarType dtype) {
  lazyInitCUDA();
  std::size_t nbytes = c10::elementSize(dtype);
  for (int64_t s : size) nbytes *= static_cast<std::size_t>(s);
  auto storage = std::make_shared<StorageImpl>();
  storage->data = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(nbytes, getCurrentCUDAStream().stream());
  storage->nbytes = nbytes;
  storage->device = kCUDA;
  storage->deleter = [](void* p) { c10::cuda::CUDACachingAllocator::raw_delete(p); };
  return at::detail::make_tensor(std::move(storage), size, dtype);
}

}  // namespace at::cuda
