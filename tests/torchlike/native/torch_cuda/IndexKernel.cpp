// Mirrors aten/src/ATen/native/cuda/IndexKernel.cpp: masked_select is index() with the mask
// (masked_select_out_cuda_impl -> index_out), whose meta expands the mask with nonzero().
#include "cuda_native.h"

namespace at::native {
namespace {
TORCHLIKE_FRAME Tensor masked_select_out_cuda_impl(const Tensor& self, const Tensor& mask) {
  return index_out(self, {mask});
}
}  // namespace

TORCHLIKE_FRAME Tensor masked_select_cuda(const Tensor& self, const Tensor& mask) {
  return masked_select_out_cuda_impl(self, mask);
}

}  // namespace at::native
