// A stand-in for PyTorch's native library: the same entry points by name (at::native::...,
// c10::cuda::...), doing the same CUDA calls, so that trainshim's classifier can be tested on
// simcuda without PyTorch. Python reaches it through ctypes (the ft_* functions), as it reaches
// torch through its bindings.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdlib>

#include "simcuda.h"

namespace {
cudaStream_t g_stream = nullptr;
void* g_device = nullptr;
}  // namespace

namespace at::native {

// Tensor.item(): a scalar read back into host (stack) memory, then the stream waited for.
__attribute__((noinline)) double _local_scalar_dense(const void* device_scalar) {
  float value = 0;
  cudaMemcpyAsync(&value, device_scalar, sizeof value, cudaMemcpyDeviceToHost, g_stream);
  cudaStreamSynchronize(g_stream);
  return value;
}

// nonzero(): the number of results is read back before the output can be allocated.
__attribute__((noinline)) long nonzero_cuda(const void* device_count) {
  int count = 0;
  cudaMemcpyAsync(&count, device_count, sizeof count, cudaMemcpyDeviceToHost, g_stream);
  cudaStreamSynchronize(g_stream);
  return count;
}

// Tensor.cpu(): a blocking copy into a new (pageable) host tensor.
__attribute__((noinline)) void copy_(void* host, const void* device, std::size_t bytes) {
  cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, g_stream);
  cudaStreamSynchronize(g_stream);
}

}  // namespace at::native

namespace c10::cuda {
__attribute__((noinline)) void device_synchronize() { cudaDeviceSynchronize(); }
}  // namespace c10::cuda

extern "C" {

int ft_init() {
  if (cudaStreamCreate(&g_stream) != cudaSuccess) return 1;
  return cudaMalloc(&g_device, 1 << 16) == cudaSuccess ? 0 : 1;
}
__attribute__((noinline)) double ft_item() { return at::native::_local_scalar_dense(g_device); }
__attribute__((noinline)) long ft_nonzero() { return at::native::nonzero_cuda(g_device); }
__attribute__((noinline)) int ft_cpu(std::size_t bytes) {
  void* host = std::malloc(bytes);
  at::native::copy_(host, g_device, bytes);
  std::free(host);
  return 0;
}
__attribute__((noinline)) void ft_synchronize() { c10::cuda::device_synchronize(); }
int ft_busy(unsigned microseconds) { return simcudaBusy(g_stream, microseconds); }
// The stream the stand-in framework computes on (torch.cuda.current_stream()).
void* ft_stream() { return g_stream; }
// A batch uploaded from pageable memory: what a DataLoader with pin_memory=False makes.
int ft_upload(std::size_t bytes) {
  void* host = std::calloc(1, bytes);
  const int rc = cudaMemcpy(g_device, host, bytes, cudaMemcpyHostToDevice);
  std::free(host);
  return rc;
}

}  // extern "C"
