// Mirrors aten/src/ATen/native/cuda/Equal.cpp (cuda_equal): eq(self, src).all().item().
#include "cuda_native.h"

namespace at::native {

TORCHLIKE_FRAME bool cuda_equal(const Tensor& self, const Tensor& src) {
  TORCH_CHECK(self.device_type() == src.device_type(), "Cannot compare two tensors on different devices.");
  if (self.sizes() != src.sizes()) return false;
  if (self.numel() == 0) return true;
  // The real shortcut for two views of the same memory.
  if (self.data_ptr() == src.data_ptr() && self.scalar_type() == src.scalar_type()) return true;
  return _ops::eq_Tensor::call(self, src).all().item().to<bool>();
}

}  // namespace at::native
