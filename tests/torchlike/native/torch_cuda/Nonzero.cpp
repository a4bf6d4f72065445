// Mirrors aten/src/ATen/native/cuda/Nonzero.cu: the count of nonzero elements is reduced on the
// device into memory from the caching allocator, then copied with memcpy_and_sync into a pinned
// host tensor (a stack int, pageable, in older trees: TORCHLIKE_SCALAR_INTO_PAGEABLE=1) before
// the output can be sized; then the positions are selected on the device.
#include "cuda_native.h"

namespace at::native {

bool scalar_into_pageable();

namespace {

template <typename scalar_t>
TORCHLIKE_FRAME void nonzero_cuda_out_impl(const Tensor& self, Tensor& out) {
  const int64_t N = self.numel();
  const cudaStream_t stream = cuda::getCurrentCUDAStream().stream();
  auto* num_nonzeros = static_cast<int*>(c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(sizeof(int), stream));
  Tensor input = self;
  cuda::launch_kernel(
      [input = at::detail::kernel_arg(input), num_nonzeros, N] {  // cub::DeviceReduce::Sum over NonZeroOp
        int count = 0;
        for (int64_t i = 0; i < N; ++i) count += load(input, i) != 0;
        *num_nonzeros = count;
      });
  int num_nonzeros_h = 0;
  if (scalar_into_pageable()) {
    at::cuda::memcpy_and_sync(&num_nonzeros_h, num_nonzeros, sizeof(int), cudaMemcpyDeviceToHost, stream);
  } else {
    Tensor pinned_num_nonzeros_h = at::empty({1}, kInt, kCPU, /*pin_memory=*/true);
    at::cuda::memcpy_and_sync(pinned_num_nonzeros_h.data_ptr(), num_nonzeros, sizeof(int), cudaMemcpyDeviceToHost,
                              stream);
    num_nonzeros_h = *static_cast<int*>(pinned_num_nonzeros_h.data_ptr());
  }
  c10::cuda::CUDACachingAllocator::raw_delete(num_nonzeros);
  out = at::empty({num_nonzeros_h, self.dim()}, kLong, kCUDA);
  Tensor result = out;
  cuda::launch_kernel([input = at::detail::kernel_arg(input),
                       result = at::detail::kernel_arg(result)] {  // cub::DeviceSelect::Flagged, then the coordinates
    const int64_t ndim = input.dim();
    int64_t k = 0;
    for (int64_t i = 0, n = input.numel(); i < n; ++i) {
      if (load(input, i) == 0) continue;
      int64_t rest = i;
      for (int64_t d = ndim - 1; d >= 0; --d) {
        store(result, k * ndim + d, static_cast<double>(rest % input.size(d)));
        rest /= input.size(d);
      }
      ++k;
    }
  });
}

}  // namespace

// Mirrors nonzero_out_cuda: AT_DISPATCH over the input's dtype.
TORCHLIKE_FRAME Tensor& nonzero_out_cuda(const Tensor& self, Tensor& out) {
  switch (self.scalar_type()) {
    case kBool:
      nonzero_cuda_out_impl<bool>(self, out);
      break;
    case kLong:
      nonzero_cuda_out_impl<int64_t>(self, out);
      break;
    default:
      nonzero_cuda_out_impl<float>(self, out);
      break;
  }
  return out;
}

TORCHLIKE_FRAME Tensor nonzero_cuda(const Tensor& self) {
  Tensor out;
  return nonzero_out_cuda(self, out);
}

}  // namespace at::native
