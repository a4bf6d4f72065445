// Mirrors the generated aten/src/ATen/RegisterCUDA.cpp: anonymous wrapper_CUDA_* functions
// registered for the CUDA dispatch key when libtorch_cuda is loaded (TORCH_LIBRARY_IMPL(aten,
// CUDA, m)), and the pinned allocator of the CUDA hooks.
#include "cuda_native.h"

namespace at {
namespace {
namespace {

TORCHLIKE_FRAME Tensor wrapper_CUDA_memory_format_empty(const std::vector<int64_t>& size, ScalarType dtype) {
  return cuda::empty_cuda(size, dtype);
}
TORCHLIKE_FRAME Scalar wrapper_CUDA___local_scalar_dense(const Tensor& self) {
  return native::_local_scalar_dense_cuda(self);
}
TORCHLIKE_FRAME Tensor wrapper_CUDA__nonzero(const Tensor& self) { return native::nonzero_cuda(self); }
TORCHLIKE_FRAME Tensor wrapper_CUDA_index_Tensor(const Tensor& self, const std::vector<Tensor>& indices) {
  return native::index_out(self, indices);
}
TORCHLIKE_FRAME Tensor wrapper_CUDA__masked_select(const Tensor& self, const Tensor& mask) {
  return native::masked_select_cuda(self, mask);
}
TORCHLIKE_FRAME std::tuple<Tensor, Tensor, Tensor> wrapper_CUDA___unique2(const Tensor& self, bool sorted,
                                                                          bool return_inverse, bool return_counts) {
  return native::_unique2_cuda(self, sorted, return_inverse, return_counts);
}
TORCHLIKE_FRAME Tensor wrapper_CUDA_Tensor_repeat_interleave(const Tensor& repeats) {
  return native::repeat_interleave_cuda(repeats);
}
TORCHLIKE_FRAME bool wrapper_CUDA__equal(const Tensor& self, const Tensor& other) {
  return native::cuda_equal(self, other);
}
TORCHLIKE_FRAME Tensor wrapper_CUDA__bincount(const Tensor& self, int64_t minlength) {
  return native::_bincount_cuda(self, minlength);
}
TORCHLIKE_FRAME Tensor wrapper_CUDA__histc(const Tensor& self, int64_t bins, const Scalar& min, const Scalar& max) {
  return native::_histc_cuda(self, bins, min, max);
}

struct RegisterCUDAKernels {
  RegisterCUDAKernels() {
    detail::CUDAKernels& k = detail::cuda_kernels();
    k.empty = wrapper_CUDA_memory_format_empty;
    k.launch = cuda::launch_kernel;
    k.allocate_pinned = cuda::CachingHostAllocator::allocate;
    k._local_scalar_dense = wrapper_CUDA___local_scalar_dense;
    k.nonzero = wrapper_CUDA__nonzero;
    k.index_Tensor = wrapper_CUDA_index_Tensor;
    k.masked_select = wrapper_CUDA__masked_select;
    k._unique2 = wrapper_CUDA___unique2;
    k.repeat_interleave_Tensor = wrapper_CUDA_Tensor_repeat_interleave;
    k.equal = wrapper_CUDA__equal;
    k.bincount = wrapper_CUDA__bincount;
    k.histc = wrapper_CUDA__histc;
  }
};
const RegisterCUDAKernels register_cuda_kernels;

}  // namespace
}  // namespace
}  // namespace at
