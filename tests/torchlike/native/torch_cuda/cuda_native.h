// Declarations shared by libtorch_cuda's sources (ATen/native/cuda and ATen/cuda, reduced).
#pragma once

#include "torchlike/aten.h"
#include "torchlike/c10_cuda.h"

namespace at::cuda {

// ATen/cuda/CachingHostAllocator.h
namespace CachingHostAllocator {
std::shared_ptr<StorageImpl> allocate(std::size_t nbytes);
// Mirrors CachingHostAllocator_recordEvent: the block of `ptr` was used on `stream`.
void recordEvent(void* ptr, CUDAStream stream);
}  // namespace CachingHostAllocator

// gpu_kernel (ATen/native/cuda/Loops.cuh), simulated: the kernel runs on the current stream.
void launch_kernel(std::function<void()> kernel);
// at::cuda::detail::CUDAHooks: context creation at the first CUDA use.
void lazyInitCUDA();
// The TensorImpl of memory from the CUDA caching allocator.
Tensor empty_cuda(const std::vector<int64_t>& size, ScalarType dtype);

}  // namespace at::cuda

namespace at::native {
TORCH_API Scalar _local_scalar_dense_cuda(const Tensor& self);
TORCH_API Tensor nonzero_cuda(const Tensor& self);
TORCH_API Tensor masked_select_cuda(const Tensor& self, const Tensor& mask);
TORCH_API std::tuple<Tensor, Tensor, Tensor> _unique2_cuda(const Tensor& self, bool sorted, bool return_inverse,
                                                           bool return_counts);
TORCH_API Tensor repeat_interleave_cuda(const Tensor& repeats);
TORCH_API bool cuda_equal(const Tensor& self, const Tensor& other);
TORCH_API Tensor _bincount_cuda(const Tensor& self, int64_t minlength);
TORCH_API Tensor _histc_cuda(const Tensor& self, int64_t bins, const Scalar& min, const Scalar& max);
// Exported from libtorch_cpu (TensorAdvancedIndexing.cpp).
TORCH_API Tensor index_out(const Tensor& self, const std::vector<Tensor>& indices);
}  // namespace at::native
