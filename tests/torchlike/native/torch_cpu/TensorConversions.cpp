// Mirrors aten/src/ATen/native/TensorConversions.cpp (to, to_impl, _to_copy with pin_out),
// Copy.cpp (copy_, copy_impl, copy_stub: CPU copies here, every copy that touches CUDA goes to
// copy_kernel_cuda in libtorch_cuda) and Memory.cpp (pin_memory, _pin_memory).
#include <cstring>

#include "torchlike/aten.h"

namespace at {
namespace {

// Mirrors copy_impl: same-device CPU copies in place, everything else through the CUDA stub.
TORCHLIKE_FRAME Tensor& copy_impl(Tensor& self, const Tensor& src, bool non_blocking) {
  TORCH_CHECK(self.numel() == src.numel(), "copy_: sizes differ");
  if (self.is_cpu() && src.is_cpu()) {
    if (self.scalar_type() == src.scalar_type()) {
      std::memmove(self.data_ptr(), src.data_ptr(), src.nbytes());
    } else {
      for (int64_t i = 0, n = src.numel(); i < n; ++i) store(self, i, load(src, i));
    }
    return self;
  }
  detail::cuda_kernels().copy_stub(self, src, non_blocking);
  return self;
}

// Mirrors to_impl: no copy when nothing changes.
TORCHLIKE_FRAME Tensor to_impl(const Tensor& self, ScalarType dtype, DeviceType device, bool pin_memory,
                               bool non_blocking, bool copy) {
  if (!copy && self.scalar_type() == dtype && self.device_type() == device && (!pin_memory || self.is_pinned()))
    return self;
  return _ops::_to_copy::call(self, dtype, device, pin_memory, non_blocking);
}

}  // namespace

namespace native {

// Mirrors at::native::to (the dtype_layout overload).
TORCH_API TORCHLIKE_FRAME Tensor to(const Tensor& self, ScalarType dtype, DeviceType device, bool pin_memory,
                                    bool non_blocking, bool copy) {
  return to_impl(self, dtype, device, pin_memory, non_blocking, copy);
}

// Mirrors at::native::_to_copy: a non-blocking download goes into pinned memory (pin_out).
TORCH_API TORCHLIKE_FRAME Tensor _to_copy(const Tensor& self, ScalarType dtype, DeviceType device, bool pin_memory,
                                          bool non_blocking) {
  const bool pin_out = non_blocking && self.is_cuda() && device == kCPU;
  Tensor r = at::empty(self.sizes(), dtype, device, pin_memory || pin_out);
  r.copy_(self, non_blocking);
  return r;
}

// Mirrors at::native::copy_.
TORCH_API TORCHLIKE_FRAME Tensor& copy_(Tensor& self, const Tensor& src, bool non_blocking) {
  return copy_impl(self, src, non_blocking);
}

// Mirrors at::native::pin_memory.
TORCH_API TORCHLIKE_FRAME Tensor pin_memory(const Tensor& self) {
  TORCH_CHECK(self.is_cpu(), "cannot pin '" + std::string(self.is_cuda() ? "torch.cuda" : "?") +
                                 ".FloatTensor' only dense CPU tensors can be pinned");
  if (self.is_pinned()) return self;
  return _ops::_pin_memory::call(self);
}

// Mirrors at::native::_pin_memory: storage from the pinned allocator, then a CPU copy.
TORCH_API TORCHLIKE_FRAME Tensor _pin_memory(const Tensor& self) {
  TORCH_CHECK(detail::cuda_kernels().allocate_pinned, "Need to provide pin_memory allocator to use pin memory.");
  Tensor tensor =
      detail::make_tensor(detail::cuda_kernels().allocate_pinned(self.nbytes()), self.sizes(), self.scalar_type());
  tensor.copy_(self);
  return tensor;
}

}  // namespace native

namespace _ops {

TORCHLIKE_FRAME Tensor to_dtype_layout::call(const Tensor& self, ScalarType dtype, DeviceType device, bool pin_memory,
                                             bool non_blocking, bool copy) {
  return native::to(self, dtype, device, pin_memory, non_blocking, copy);
}

TORCHLIKE_FRAME Tensor to_device::call(const Tensor& self, DeviceType device, ScalarType dtype, bool non_blocking,
                                       bool copy) {
  return to_impl(self, dtype, device, false, non_blocking, copy);
}

TORCHLIKE_FRAME Tensor _to_copy::call(const Tensor& self, ScalarType dtype, DeviceType device, bool pin_memory,
                                      bool non_blocking) {
  return native::_to_copy(self, dtype, device, pin_memory, non_blocking);
}

TORCHLIKE_FRAME Tensor& copy_::call(Tensor& self, const Tensor& src, bool non_blocking) {
  return native::copy_(self, src, non_blocking);
}

TORCHLIKE_FRAME Tensor clone::call(const Tensor& self) {
  Tensor out = native::empty_like(self, self.scalar_type());
  out.copy_(self);
  return out;
}

TORCHLIKE_FRAME Tensor pin_memory::call(const Tensor& self) { return native::pin_memory(self); }
TORCHLIKE_FRAME Tensor _pin_memory::call(const Tensor& self) { return native::_pin_memory(self); }

}  // namespace _ops
}  // namespace at
