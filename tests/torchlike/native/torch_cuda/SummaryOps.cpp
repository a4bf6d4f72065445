// Mirrors aten/src/ATen/native/cuda/SummaryOps.cu: bincount reads the minimum back with
// self.min().cpu() (the check for negative values) and the bin count with self.max().item();
// histc with min == max (the default) reads both bounds back with .cpu().
#include <algorithm>

#include "cuda_native.h"

namespace at::native {
namespace {

template <typename input_t>
TORCHLIKE_FRAME Tensor _bincount_cuda_template(const Tensor& self, int64_t minlength) {
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  TORCH_CHECK(self.dim() == 1 && load(self.min().cpu(), 0) >= 0,
              "bincount only supports 1-d non-negative integral inputs.");
  const int64_t nbins = std::max(self.max().item().to<int64_t>() + 1, minlength);
  Tensor output = at::empty({nbins}, kLong, kCUDA);
  cuda::launch_kernel(
      [self = at::detail::kernel_arg(self), output = at::detail::kernel_arg(output)] {  // CUDA_tensor_histogram
        for (int64_t b = 0, n = output.numel(); b < n; ++b) store(output, b, 0);
        for (int64_t i = 0, n = self.numel(); i < n; ++i) {
          const auto b = static_cast<int64_t>(load(self, i));
          store(output, b, load(output, b) + 1);
        }
      });
  return output;
}

template <typename input_t>
TORCHLIKE_FRAME Tensor _histc_cuda_template(const Tensor& self, int64_t nbins, double min, double max) {
  TORCH_CHECK(nbins > 0, "bins must be > 0");
  double minvalue = min, maxvalue = max;
  if (min == max && self.numel() > 0) {
    minvalue = load(self.min().cpu(), 0);
    maxvalue = load(self.max().cpu(), 0);
  }
  if (minvalue == maxvalue) {
    minvalue -= 1;
    maxvalue += 1;
  }
  Tensor output = at::empty({nbins}, self.scalar_type(), kCUDA);
  cuda::launch_kernel([self = at::detail::kernel_arg(self), output = at::detail::kernel_arg(output), nbins, minvalue,
                       maxvalue] {  // CUDA_tensor_histogram
    for (int64_t b = 0; b < nbins; ++b) store(output, b, 0);
    for (int64_t i = 0, n = self.numel(); i < n; ++i) {
      const double v = load(self, i);
      if (v < minvalue || v > maxvalue) continue;
      auto b = static_cast<int64_t>((v - minvalue) * static_cast<double>(nbins) / (maxvalue - minvalue));
      if (b == nbins) b -= 1;
      store(output, b, load(output, b) + 1);
    }
  });
  return output;
}

}  // namespace

TORCHLIKE_FRAME Tensor _bincount_cuda(const Tensor& self, int64_t minlength) {
  return _bincount_cuda_template<int64_t>(self, minlength);
}

TORCHLIKE_FRAME Tensor _histc_cuda(const Tensor& self, int64_t nbins, const Scalar& min, const Scalar& max) {
  return _histc_cuda_template<float>(self, nbins, min.value, max.value);
}

}  // namespace at::native
