// Mirrors aten/src/ATen/native/TensorFactories.cpp and ATen/EmptyTensor.cpp: empty_cpu
// (malloc'd, pageable, or pinned through the CUDA hooks' host allocator when pin_memory) and
// the random and range factories.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "torchlike/aten.h"

namespace at {

namespace detail {

CUDAKernels& cuda_kernels() {
  static CUDAKernels kernels;
  return kernels;
}

void launch_on(DeviceType device, std::function<void()> kernel) {
  if (device == kCUDA) {
    cuda_kernels().launch(std::move(kernel));
  } else {
    kernel();
  }
}

Tensor make_tensor(std::shared_ptr<StorageImpl> storage, std::vector<int64_t> sizes, ScalarType dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->sizes = std::move(sizes);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// Mirrors at::detail::empty_cpu: GetCPUAllocatorMaybePinned(pin_memory).
TORCHLIKE_FRAME Tensor empty_cpu(const std::vector<int64_t>& size, ScalarType dtype, bool pin_memory) {
  std::size_t nbytes = c10::elementSize(dtype);
  for (int64_t s : size) nbytes *= static_cast<std::size_t>(s);
  std::shared_ptr<StorageImpl> storage;
  if (pin_memory) {
    TORCH_CHECK(cuda_kernels().allocate_pinned, "pin_memory needs CUDA");
    storage = cuda_kernels().allocate_pinned(nbytes);
  } else {
    storage = std::make_shared<StorageImpl>();
    storage->data = std::malloc(nbytes ? nbytes : 1);
    storage->nbytes = nbytes;
    storage->deleter = [](void* p) { std::free(p); };
  }
  return make_tensor(std::move(storage), size, dtype);
}

}  // namespace detail

Tensor wrapped_scalar(const Scalar& value) {
  Tensor t = detail::empty_cpu({}, value.type, false);
  store(t, 0, value.value);
  return t;
}

namespace native {

Tensor empty_like(const Tensor& self, ScalarType dtype) { return at::empty(self.sizes(), dtype, self.device_type()); }

}  // namespace native

namespace {
// The default generator; the CUDA one is seeded and advanced from the host, as philox's offset is.
std::mt19937_64& generator() {
  static std::mt19937_64 gen(0);
  return gen;
}
}  // namespace

namespace _ops {

Tensor empty_memory_format::call(const std::vector<int64_t>& size, ScalarType dtype, DeviceType device,
                                 bool pin_memory) {
  if (device == kCUDA) {
    TORCH_CHECK(detail::cuda_kernels().empty, "Torch not compiled with CUDA enabled");
    return detail::cuda_kernels().empty(size, dtype);
  }
  return detail::empty_cpu(size, dtype, pin_memory);
}

Tensor& fill__Scalar::call(Tensor& self, const Scalar& value) {
  Tensor out = self;
  const double v = value.value;
  detail::launch_on(self.device_type(), [out = at::detail::kernel_arg(out), v] {
    for (int64_t i = 0, n = out.numel(); i < n; ++i) store(out, i, v);
  });
  return self;
}

Tensor randn::call(const std::vector<int64_t>& size, ScalarType dtype, DeviceType device) {
  Tensor out = at::empty(size, dtype, device);
  const uint64_t seed = generator()();
  detail::launch_on(device, [out = at::detail::kernel_arg(out), seed] {
    std::mt19937_64 gen(seed);
    std::normal_distribution<double> normal;
    for (int64_t i = 0, n = out.numel(); i < n; ++i) store(out, i, normal(gen));
  });
  return out;
}

Tensor randint_low::call(int64_t low, int64_t high, const std::vector<int64_t>& size, DeviceType device) {
  Tensor out = at::empty(size, kLong, device);
  const uint64_t seed = generator()();
  detail::launch_on(device, [out = at::detail::kernel_arg(out), seed, low, high] {
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<int64_t> uniform(low, high - 1);
    for (int64_t i = 0, n = out.numel(); i < n; ++i) store(out, i, static_cast<double>(uniform(gen)));
  });
  return out;
}

Tensor arange_start_step::call(const Scalar& start, const Scalar& end, const Scalar& step, ScalarType dtype,
                               DeviceType device) {
  const auto n = static_cast<int64_t>(std::ceil((end.value - start.value) / step.value));
  Tensor out = at::empty({n < 0 ? 0 : n}, dtype, device);
  const double first = start.value, delta = step.value;
  detail::launch_on(device, [out = at::detail::kernel_arg(out), first, delta] {
    for (int64_t i = 0, count = out.numel(); i < count; ++i) store(out, i, first + delta * static_cast<double>(i));
  });
  return out;
}

}  // namespace _ops
}  // namespace at
