// Mirrors aten/src/ATen/native/cuda/Repeat.cu (repeat_interleave_cuda) over
// ATen/native/Repeat.h (repeat_interleave_common): without output_size, the total is read with
// cumsum[-1].item() and the check (repeats >= 0).all().item(): two synchronisations.
#include "cuda_native.h"

namespace at::native {
namespace {

// Mirrors compute_cuda: out[j] = i for each of the repeats[i] slots of i.
void compute_cuda(const Tensor& repeats, const Tensor& cumsum, const Tensor& result) {
  cuda::launch_kernel([repeats = at::detail::kernel_arg(repeats), cumsum = at::detail::kernel_arg(cumsum),
                       result = at::detail::kernel_arg(result)] {
    for (int64_t i = 0, n = repeats.numel(); i < n; ++i) {
      const auto end = static_cast<int64_t>(load(cumsum, i));
      for (int64_t j = end - static_cast<int64_t>(load(repeats, i)); j < end; ++j)
        store(result, j, static_cast<double>(i));
    }
  });
}

TORCHLIKE_FRAME Tensor repeat_interleave_common(const Tensor& repeats) {
  TORCH_CHECK(repeats.dim() == 1, "repeat_interleave only accept 1D vector as repeat");
  TORCH_CHECK(repeats.scalar_type() == kLong || repeats.scalar_type() == kInt, "repeats has to be Long or Int tensor");
  if (repeats.size(0) == 0) return at::empty({0}, repeats.scalar_type(), kCUDA);
  Tensor cumsum = repeats.cumsum(0);
  const int64_t total = cumsum.select(0, -1).item().to<int64_t>();
  TORCH_CHECK(_ops::ge_Tensor::call(repeats, at::wrapped_scalar({0, kLong})).all().item().to<bool>(),
              "repeats can not be negative");
  Tensor result = at::empty({total}, repeats.scalar_type(), kCUDA);
  compute_cuda(repeats, cumsum, result);
  return result;
}

}  // namespace

TORCHLIKE_FRAME Tensor repeat_interleave_cuda(const Tensor& repeats) { return repeat_interleave_common(repeats); }

}  // namespace at::native
