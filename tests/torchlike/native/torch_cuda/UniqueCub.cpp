// Mirrors aten/src/ATen/native/cuda/Unique.cu (_unique2_cuda) and UniqueCub.cu
// (unique_cuda_template -> UniqueCub<T>): a sort and a unique on the device, whose output
// length is read back with length.item<int64_t>() in compute_unique; the bool specialisation
// counts the true values instead and reads the count with memcpy_and_sync into a stack int
// (pageable memory).
#include <algorithm>
#include <vector>

#include "cuda_native.h"

namespace at::native::internal {
namespace {

// Mirrors compute_unique<scalar_t>.
template <typename scalar_t>
TORCHLIKE_FRAME std::tuple<Tensor, Tensor, Tensor> compute_unique(const Tensor& sorted, bool return_counts) {
  const int64_t num_inp = sorted.numel();
  Tensor data_out = at::empty({num_inp}, sorted.scalar_type(), kCUDA);
  Tensor counts_out = at::empty({num_inp}, kLong, kCUDA);
  Tensor length = at::empty({1}, kLong, kCUDA);
  cuda::launch_kernel([sorted = at::detail::kernel_arg(sorted), data_out = at::detail::kernel_arg(data_out),
                       counts_out = at::detail::kernel_arg(counts_out), length = at::detail::kernel_arg(length),
                       num_inp] {  // cuda::cub::unique(_by_key)
    int64_t n = 0;
    for (int64_t i = 0; i < num_inp; ++i) {
      const double v = load(sorted, i);
      if (n > 0 && load(data_out, n - 1) == v) {
        store(counts_out, n - 1, load(counts_out, n - 1) + 1);
        continue;
      }
      store(data_out, n, v);
      store(counts_out, n, 1);
      ++n;
    }
    store(length, 0, static_cast<double>(n));
  });
  const int64_t num_out = length.item().to<int64_t>();
  Tensor values = _ops::slice_Tensor::call(data_out, 0, 0, num_out);
  Tensor counts = return_counts ? _ops::slice_Tensor::call(counts_out, 0, 0, num_out) : at::empty({0}, kLong, kCUDA);
  return {values, at::empty({0}, kLong, kCUDA), counts};
}

template <typename scalar_t>
struct UniqueCub {
  TORCHLIKE_FRAME std::tuple<Tensor, Tensor, Tensor> operator()(const Tensor& self, bool return_counts) {
    Tensor sorted = at::empty({self.numel()}, self.scalar_type(), kCUDA);
    cuda::launch_kernel(
        [self = at::detail::kernel_arg(self), sorted = at::detail::kernel_arg(sorted)] {  // cuda::cub::radix_sort_keys
          std::vector<double> keys(static_cast<std::size_t>(self.numel()));
          for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = load(self, static_cast<int64_t>(i));
          std::sort(keys.begin(), keys.end());
          for (std::size_t i = 0; i < keys.size(); ++i) store(sorted, static_cast<int64_t>(i), keys[i]);
        });
    return compute_unique<scalar_t>(sorted, return_counts);
  }
};

template <>
struct UniqueCub<bool> {
  TORCHLIKE_FRAME std::tuple<Tensor, Tensor, Tensor> operator()(const Tensor& self, bool return_counts) {
    const cudaStream_t stream = cuda::getCurrentCUDAStream().stream();
    const int64_t num_inp = self.numel();
    auto* tmp_num_true = static_cast<int*>(c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(sizeof(int), stream));
    cuda::launch_kernel(
        [self = at::detail::kernel_arg(self), tmp_num_true, num_inp] {  // cub reduce of MapNumberOfTrueValues
          int count = 0;
          for (int64_t i = 0; i < num_inp; ++i) count += load(self, i) != 0;
          *tmp_num_true = count;
        });
    int num_true = 0;
    at::cuda::memcpy_and_sync(&num_true, tmp_num_true, sizeof(int), cudaMemcpyDeviceToHost, stream);
    c10::cuda::CUDACachingAllocator::raw_delete(tmp_num_true);
    const int64_t num_false = num_inp - num_true;
    const int64_t num_out = (num_true > 0) + (num_false > 0);
    Tensor output = at::empty({num_out}, kBool, kCUDA);
    Tensor counts = at::empty({return_counts ? num_out : 0}, kLong, kCUDA);
    cuda::launch_kernel(
        [output = at::detail::kernel_arg(output), counts = at::detail::kernel_arg(counts), num_true, num_false] {
          int64_t k = 0;
          if (num_false > 0) {
            store(output, k, 0);
            if (counts.numel()) store(counts, k, static_cast<double>(num_false));
            ++k;
          }
          if (num_true > 0) {
            store(output, k, 1);
            if (counts.numel()) store(counts, k, num_true);
          }
        });
    return {output, at::empty({0}, kLong, kCUDA), counts};
  }
};

}  // namespace

// Mirrors internal::unique_cuda_template<scalar_t>.
template <typename scalar_t>
TORCHLIKE_FRAME std::tuple<Tensor, Tensor, Tensor> unique_cuda_template(const Tensor& self, bool return_counts) {
  return UniqueCub<scalar_t>{}(self, return_counts);
}

}  // namespace at::native::internal

namespace at::native {

TORCHLIKE_FRAME std::tuple<Tensor, Tensor, Tensor> _unique2_cuda(const Tensor& self, bool, bool, bool return_counts) {
  switch (self.scalar_type()) {
    case kBool:
      return internal::unique_cuda_template<bool>(self, return_counts);
    case kLong:
      return internal::unique_cuda_template<int64_t>(self, return_counts);
    default:
      return internal::unique_cuda_template<float>(self, return_counts);
  }
}

}  // namespace at::native
