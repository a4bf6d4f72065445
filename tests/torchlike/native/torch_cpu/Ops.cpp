// The entry points of the ops whose CUDA kernels hide a synchronisation (unique, repeat_interleave,
// equal, bincount, histc): each dispatches to the kernel libtorch_cuda registered.
#include "torchlike/aten.h"

namespace at {
namespace {
void require_cuda(const Tensor& self, const char* op) {
  TORCH_CHECK(self.is_cuda(), std::string(op) + " on CPU tensors is not part of the stand-in");
}
}  // namespace

namespace native {
// Mirrors cpu_equal.
TORCH_API TORCHLIKE_FRAME bool cpu_equal(const Tensor& self, const Tensor& other) {
  if (self.sizes() != other.sizes()) return false;
  for (int64_t i = 0, n = self.numel(); i < n; ++i)
    if (load(self, i) != load(other, i)) return false;
  return true;
}
}  // namespace native

namespace _ops {

TORCHLIKE_FRAME std::tuple<Tensor, Tensor, Tensor> _unique2::call(const Tensor& self, bool sorted, bool return_inverse,
                                                                  bool return_counts) {
  require_cuda(self, "unique");
  return detail::cuda_kernels()._unique2(self, sorted, return_inverse, return_counts);
}

TORCHLIKE_FRAME Tensor repeat_interleave_Tensor::call(const Tensor& repeats) {
  require_cuda(repeats, "repeat_interleave");
  return detail::cuda_kernels().repeat_interleave_Tensor(repeats);
}

TORCHLIKE_FRAME bool equal::call(const Tensor& self, const Tensor& other) {
  if (self.is_cuda()) return detail::cuda_kernels().equal(self, other);
  return native::cpu_equal(self, other);
}

TORCHLIKE_FRAME Tensor bincount::call(const Tensor& self, int64_t minlength) {
  require_cuda(self, "bincount");
  return detail::cuda_kernels().bincount(self, minlength);
}

TORCHLIKE_FRAME Tensor histc::call(const Tensor& self, int64_t bins, const Scalar& min, const Scalar& max) {
  require_cuda(self, "histc");
  return detail::cuda_kernels().histc(self, bins, min, max);
}

}  // namespace _ops
}  // namespace at
