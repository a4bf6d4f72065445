// Mirrors aten/src/ATen/native/cuda/CUDAScalar.cu: the element is copied into a pinned 1-element
// tensor (at::detail::empty_cpu(..., pin_memory=true)) with memcpy_and_sync. Older trees copied
// into a stack variable (pageable); TORCHLIKE_SCALAR_INTO_PAGEABLE=1 selects that behaviour.
#include <cstdlib>

#include "cuda_native.h"

namespace at::native {

bool scalar_into_pageable() {
  static const bool pageable = [] {
    const char* env = std::getenv("TORCHLIKE_SCALAR_INTO_PAGEABLE");
    return env && env[0] == '1';
  }();
  return pageable;
}

TORCHLIKE_FRAME Scalar _local_scalar_dense_cuda(const Tensor& self) {
  TORCH_CHECK(self.numel() > 0, "_local_scalar_dense: Empty tensor not supported");
  const cudaStream_t stream = cuda::getCurrentCUDAStream().stream();
  if (scalar_into_pageable()) {
    alignas(8) unsigned char value[8];
    at::cuda::memcpy_and_sync(value, self.data_ptr(), static_cast<int64_t>(self.element_size()), cudaMemcpyDeviceToHost,
                              stream);
    Tensor view = detail::make_tensor(std::make_shared<StorageImpl>(), {}, self.scalar_type());
    view.impl()->storage->data = value;
    return Scalar{load(view, 0), self.scalar_type()};
  }
  Tensor value = at::empty({1}, self.scalar_type(), kCPU, /*pin_memory=*/true);
  at::cuda::memcpy_and_sync(value.data_ptr(), self.data_ptr(), static_cast<int64_t>(self.element_size()),
                            cudaMemcpyDeviceToHost, stream);
  return Scalar{load(value, 0), self.scalar_type()};
}

}  // namespace at::native
