// Mirrors aten/src/ATen/native/Scalar.cpp (item, _local_scalar_dense on CPU) and
// TensorCompare.cpp / TensorProperties.cpp (is_nonzero): item() reads one element back through
// _local_scalar_dense, whose CUDA kernel is at::native::_local_scalar_dense_cuda.
#include "torchlike/aten.h"

namespace at {
namespace native {

// Mirrors at::native::item.
TORCH_API TORCHLIKE_FRAME Scalar item(const Tensor& self) {
  TORCH_CHECK(self.numel() == 1,
              "a Tensor with " + std::to_string(self.numel()) + " elements cannot be converted to Scalar");
  return _ops::_local_scalar_dense::call(self);
}

// Mirrors at::native::_local_scalar_dense_cpu.
TORCH_API TORCHLIKE_FRAME Scalar _local_scalar_dense_cpu(const Tensor& self) {
  return Scalar{load(self, 0), self.scalar_type()};
}

// Mirrors at::native::is_nonzero: the truth of a one-element tensor is its item().
TORCH_API TORCHLIKE_FRAME bool is_nonzero(const Tensor& self) {
  TORCH_CHECK(self.numel() != 0, "Boolean value of Tensor with no values is ambiguous");
  TORCH_CHECK(self.numel() == 1, "Boolean value of Tensor with more than one value is ambiguous");
  const Scalar localScalar = self.item();
  return localScalar.value != 0;
}

}  // namespace native

namespace _ops {

TORCHLIKE_FRAME Scalar item::call(const Tensor& self) { return native::item(self); }

TORCHLIKE_FRAME Scalar _local_scalar_dense::call(const Tensor& self) {
  if (self.is_cuda()) return detail::cuda_kernels()._local_scalar_dense(self);
  return native::_local_scalar_dense_cpu(self);
}

TORCHLIKE_FRAME bool is_nonzero::call(const Tensor& self) { return native::is_nonzero(self); }

}  // namespace _ops
}  // namespace at
