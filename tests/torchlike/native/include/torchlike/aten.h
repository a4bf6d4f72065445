// ATen, reduced: the Tensor (ATen/core/TensorBody.h over c10/core/TensorImpl.h), the op entry
// points at::_ops::<op>::call (ATen/Operators.h, exported from libtorch_cpu), the CUDA side of
// the dispatcher that libtorch_cuda fills in at load time (TORCH_LIBRARY_IMPL(aten, CUDA, m) and
// REGISTER_DISPATCH in the real tree), and the autograd graph.
#pragma once

#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "torchlike/c10.h"

namespace at {

// c10/core/StorageImpl.h: memory plus the deleter of the allocator that made it.
struct StorageImpl {
  void* data = nullptr;
  std::size_t nbytes = 0;
  DeviceType device = kCPU;
  bool pinned = false;
  std::function<void(void*)> deleter;
  ~StorageImpl() {
    if (deleter) deleter(data);
  }
};

}  // namespace at
namespace torch::autograd {
struct Node;
}
namespace at {

struct TensorImpl {
  std::shared_ptr<StorageImpl> storage;
  std::size_t offset_bytes = 0;
  std::vector<int64_t> sizes;
  ScalarType dtype = kFloat;
  // torch/csrc/autograd/variable.h AutogradMeta
  bool requires_grad = false;
  std::shared_ptr<torch::autograd::Node> grad_fn;
  std::shared_ptr<TensorImpl> grad;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  bool defined() const { return impl_ != nullptr; }
  TensorImpl* unsafeGetTensorImpl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }
  int64_t dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
  const std::vector<int64_t>& sizes() const { return impl_->sizes; }
  int64_t size(int64_t d) const { return impl_->sizes[static_cast<std::size_t>(d < 0 ? d + dim() : d)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : impl_->sizes) n *= s;
    return n;
  }
  ScalarType scalar_type() const { return impl_->dtype; }
  std::size_t element_size() const { return c10::elementSize(impl_->dtype); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(); }
  DeviceType device_type() const { return impl_->storage->device; }
  bool is_cuda() const { return device_type() == kCUDA; }
  bool is_cpu() const { return device_type() == kCPU; }
  bool is_pinned() const { return impl_->storage->pinned; }
  void* data_ptr() const { return static_cast<char*>(impl_->storage->data) + impl_->offset_bytes; }
  bool requires_grad() const { return impl_->requires_grad; }

  // The inline methods of TensorBody.h: each one is a call of the op's entry point.
  Scalar item() const;
  Tensor nonzero() const;
  Tensor sum() const;
  Tensor all() const;
  Tensor min() const;
  Tensor max() const;
  Tensor cumsum(int64_t dim) const;
  Tensor cpu() const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor clone() const;
  Tensor& copy_(const Tensor& src, bool non_blocking = false);

 private:
  std::shared_ptr<TensorImpl> impl_;
};

// Element access for the simulated kernels (every dtype goes through double).
inline double load(const Tensor& t, int64_t i) {
  const void* p = t.data_ptr();
  switch (t.scalar_type()) {
    case kFloat:
      return static_cast<const float*>(p)[i];
    case kDouble:
      return static_cast<const double*>(p)[i];
    case kLong:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case kInt:
      return static_cast<const int32_t*>(p)[i];
    case kBool:
      return static_cast<const bool*>(p)[i] ? 1.0 : 0.0;
  }
  return 0;
}
inline void store(const Tensor& t, int64_t i, double v) {
  void* p = t.data_ptr();
  switch (t.scalar_type()) {
    case kFloat:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case kDouble:
      static_cast<double*>(p)[i] = v;
      break;
    case kLong:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      break;
    case kInt:
      static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      break;
    case kBool:
      static_cast<bool*>(p)[i] = v != 0;
      break;
  }
}

// The elementwise and unary functions, one list expanded into the op entry points.
#define TORCHLIKE_BINARY_OPS(X) \
  X(add_Tensor, Add)            \
  X(sub_Tensor, Sub)            \
  X(mul_Tensor, Mul)            \
  X(div_Tensor, Div)            \
  X(gt_Tensor, Gt)              \
  X(lt_Tensor, Lt)              \
  X(ge_Tensor, Ge)              \
  X(le_Tensor, Le)              \
  X(eq_Tensor, Eq)              \
  X(ne_Tensor, Ne)              \
  X(bitwise_and_Tensor, And)    \
  X(bitwise_or_Tensor, Or)
#define TORCHLIKE_UNARY_OPS(X) \
  X(neg, Neg)                  \
  X(abs, Abs)                  \
  X(ceil, Ceil)                \
  X(isfinite, IsFinite)        \
  X(logical_not, Not)

enum class BinaryOp {
#define TORCHLIKE_ENUM(op, name) name,
  TORCHLIKE_BINARY_OPS(TORCHLIKE_ENUM)
};
enum class UnaryOp { TORCHLIKE_UNARY_OPS(TORCHLIKE_ENUM) };
#undef TORCHLIKE_ENUM
enum class ReduceOp { Sum, All, Any, Max, Min };

TORCH_API double apply_binary(BinaryOp op, double a, double b);
TORCH_API double apply_unary(UnaryOp op, double a);

// ATen/Operators.h: one struct per op, its call() the entry every caller goes through.
namespace _ops {
#define TORCHLIKE_DECLARE_BINARY(op, name)                       \
  struct TORCH_API op {                                          \
    static Tensor call(const Tensor& self, const Tensor& other); \
  };
TORCHLIKE_BINARY_OPS(TORCHLIKE_DECLARE_BINARY)
#undef TORCHLIKE_DECLARE_BINARY
#define TORCHLIKE_DECLARE_UNARY(op, name)   \
  struct TORCH_API op {                     \
    static Tensor call(const Tensor& self); \
  };
TORCHLIKE_UNARY_OPS(TORCHLIKE_DECLARE_UNARY)
#undef TORCHLIKE_DECLARE_UNARY
struct TORCH_API empty_memory_format {
  static Tensor call(const std::vector<int64_t>& size, ScalarType dtype, DeviceType device, bool pin_memory);
};
struct TORCH_API fill__Scalar {
  static Tensor& call(Tensor& self, const Scalar& value);
};
struct TORCH_API randn {
  static Tensor call(const std::vector<int64_t>& size, ScalarType dtype, DeviceType device);
};
struct TORCH_API randint_low {
  static Tensor call(int64_t low, int64_t high, const std::vector<int64_t>& size, DeviceType device);
};
struct TORCH_API arange_start_step {
  static Tensor call(const Scalar& start, const Scalar& end, const Scalar& step, ScalarType dtype, DeviceType device);
};
struct TORCH_API item {
  static Scalar call(const Tensor& self);
};
struct TORCH_API _local_scalar_dense {
  static Scalar call(const Tensor& self);
};
struct TORCH_API is_nonzero {
  static bool call(const Tensor& self);
};
struct TORCH_API to_dtype_layout {
  static Tensor call(const Tensor& self, ScalarType dtype, DeviceType device, bool pin_memory, bool non_blocking,
                     bool copy);
};
struct TORCH_API to_device {
  static Tensor call(const Tensor& self, DeviceType device, ScalarType dtype, bool non_blocking, bool copy);
};
struct TORCH_API _to_copy {
  static Tensor call(const Tensor& self, ScalarType dtype, DeviceType device, bool pin_memory, bool non_blocking);
};
struct TORCH_API copy_ {
  static Tensor& call(Tensor& self, const Tensor& src, bool non_blocking);
};
struct TORCH_API clone {
  static Tensor call(const Tensor& self);
};
struct TORCH_API pin_memory {
  static Tensor call(const Tensor& self);
};
struct TORCH_API _pin_memory {
  static Tensor call(const Tensor& self);
};
struct TORCH_API nonzero {
  static Tensor call(const Tensor& self);
};
struct TORCH_API index_Tensor {
  static Tensor call(const Tensor& self, const std::vector<Tensor>& indices);
};
struct TORCH_API index_put_ {
  static Tensor& call(Tensor& self, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate);
};
struct TORCH_API masked_select {
  static Tensor call(const Tensor& self, const Tensor& mask);
};
struct TORCH_API _unique2 {
  static std::tuple<Tensor, Tensor, Tensor> call(const Tensor& self, bool sorted, bool return_inverse,
                                                 bool return_counts);
};
struct TORCH_API repeat_interleave_Tensor {
  static Tensor call(const Tensor& repeats);
};
struct TORCH_API equal {
  static bool call(const Tensor& self, const Tensor& other);
};
struct TORCH_API bincount {
  static Tensor call(const Tensor& self, int64_t minlength);
};
struct TORCH_API histc {
  static Tensor call(const Tensor& self, int64_t bins, const Scalar& min, const Scalar& max);
};
struct TORCH_API sum_dim_IntList {
  static Tensor call(const Tensor& self, std::vector<int64_t> dims, bool keepdim);
};
struct TORCH_API all {
  static Tensor call(const Tensor& self);
};
struct TORCH_API any {
  static Tensor call(const Tensor& self);
};
struct TORCH_API max {
  static Tensor call(const Tensor& self);
};
struct TORCH_API min {
  static Tensor call(const Tensor& self);
};
struct TORCH_API cumsum {
  static Tensor call(const Tensor& self, int64_t dim);
};
struct TORCH_API select_int {
  static Tensor call(const Tensor& self, int64_t dim, int64_t index);
};
struct TORCH_API slice_Tensor {
  static Tensor call(const Tensor& self, int64_t dim, int64_t start, int64_t end);
};
struct TORCH_API view {
  static Tensor call(const Tensor& self, const std::vector<int64_t>& size);
};
struct TORCH_API stack {
  static Tensor call(const std::vector<Tensor>& tensors);
};
}  // namespace _ops

// at::empty and friends (ATen/Functions.h).
inline Tensor empty(const std::vector<int64_t>& size, ScalarType dtype, DeviceType device, bool pin_memory = false) {
  return _ops::empty_memory_format::call(size, dtype, device, pin_memory);
}
TORCH_API Tensor wrapped_scalar(const Scalar& value);  // a CPU 0-dim tensor, as python scalars become

inline Scalar Tensor::item() const { return _ops::item::call(*this); }
inline Tensor Tensor::nonzero() const { return _ops::nonzero::call(*this); }
inline Tensor Tensor::sum() const { return _ops::sum_dim_IntList::call(*this, {}, false); }
inline Tensor Tensor::all() const { return _ops::all::call(*this); }
inline Tensor Tensor::min() const { return _ops::min::call(*this); }
inline Tensor Tensor::max() const { return _ops::max::call(*this); }
inline Tensor Tensor::cumsum(int64_t dim) const { return _ops::cumsum::call(*this, dim); }
inline Tensor Tensor::cpu() const {
  return _ops::to_dtype_layout::call(*this, scalar_type(), kCPU, false, false, false);
}
inline Tensor Tensor::select(int64_t dim, int64_t index) const { return _ops::select_int::call(*this, dim, index); }
inline Tensor Tensor::clone() const { return _ops::clone::call(*this); }
inline Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  return _ops::copy_::call(*this, src, non_blocking);
}

namespace detail {

// The CUDA dispatch key's kernels and stubs, registered by libtorch_cuda at load time
// (RegisterCUDA.cpp's wrapper_CUDA_* functions, REGISTER_DISPATCH(copy_stub, ...)), and the
// CUDA hooks (ATen/detail/CUDAHooksInterface.h) that the CPU library reaches CUDA through.
struct CUDAKernels {
  Tensor (*empty)(const std::vector<int64_t>& size, ScalarType dtype) = nullptr;
  // gpu_kernel: runs a simulated kernel on the current stream, in stream order.
  void (*launch)(std::function<void()> kernel) = nullptr;
  void (*copy_stub)(Tensor& dst, const Tensor& src, bool non_blocking) = nullptr;
  // CachingHostAllocator: pinned host memory.
  std::shared_ptr<StorageImpl> (*allocate_pinned)(std::size_t nbytes) = nullptr;
  Scalar (*_local_scalar_dense)(const Tensor& self) = nullptr;
  Tensor (*nonzero)(const Tensor& self) = nullptr;
  Tensor (*index_Tensor)(const Tensor& self, const std::vector<Tensor>& indices) = nullptr;
  Tensor (*masked_select)(const Tensor& self, const Tensor& mask) = nullptr;
  std::tuple<Tensor, Tensor, Tensor> (*_unique2)(const Tensor& self, bool sorted, bool return_inverse,
                                                 bool return_counts) = nullptr;
  Tensor (*repeat_interleave_Tensor)(const Tensor& repeats) = nullptr;
  bool (*equal)(const Tensor& self, const Tensor& other) = nullptr;
  Tensor (*bincount)(const Tensor& self, int64_t minlength) = nullptr;
  Tensor (*histc)(const Tensor& self, int64_t bins, const Scalar& min, const Scalar& max) = nullptr;
};
TORCH_API CUDAKernels& cuda_kernels();
// Runs `kernel` where the tensor lives: on the current stream for CUDA, at once for CPU.
TORCH_API void launch_on(DeviceType device, std::function<void()> kernel);
TORCH_API Tensor make_tensor(std::shared_ptr<StorageImpl> storage, std::vector<int64_t> sizes, ScalarType dtype);
// What a kernel receives: the tensor's memory, not its ownership. As with a real kernel's
// arguments, the memory goes back to the allocator when the host drops the tensor (reuse is
// ordered by the stream), never on the stream's thread.
inline Tensor kernel_arg(const Tensor& t) {
  auto storage = std::make_shared<StorageImpl>();
  storage->data = t.impl()->storage->data;
  storage->nbytes = t.impl()->storage->nbytes;
  storage->device = t.impl()->storage->device;
  storage->pinned = t.impl()->storage->pinned;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->offset_bytes = t.impl()->offset_bytes;
  impl->sizes = t.impl()->sizes;
  impl->dtype = t.impl()->dtype;
  return Tensor(std::move(impl));
}

}  // namespace detail

namespace native {
// The device-generic kernels (host loops), shared by the CPU and the simulated CUDA kernels.
TORCH_API void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b, BinaryOp op);
TORCH_API void index_gather_kernel(const Tensor& out, const Tensor& self, const Tensor& positions);
TORCH_API Tensor nonzero_cpu(const Tensor& self);
TORCH_API Tensor index_put_with_positions(Tensor& self, const Tensor& positions, const Tensor& values, bool accumulate);
TORCH_API Tensor empty_like(const Tensor& self, ScalarType dtype);
TORCH_API Tensor reduce(const Tensor& self, ReduceOp op, std::vector<int64_t> dims, bool keepdim);
}  // namespace native

}  // namespace at

namespace torch::autograd {

using at::Tensor;

// torch/csrc/autograd/function.h: a node of the backward graph.
struct Node {
  virtual ~Node() = default;
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grads) = 0;
  std::vector<std::shared_ptr<Node>> next_edges;  // one per input; null for inputs without grad
};

// torch/csrc/autograd/engine.h: the engine, whose device threads run the backward of CUDA
// graphs; thread_init is virtual so that libtorch_python can give those threads a PyThreadState.
class TORCH_API Engine {
 public:
  virtual ~Engine() = default;
  static Engine& get_base_engine();
  // Runs the graph to the leaves; blocks the caller until the device thread finished it.
  void execute(const Tensor& root, const Tensor& grad);
  virtual void thread_init(int device);

 protected:
  void thread_main();
};
TORCH_API void set_default_engine_stub(Engine* (*stub)());
TORCH_API Engine& get_default_engine();

// Records the backward of an op on its output when any input requires grad.
TORCH_API void record_mul_scalar(Tensor& out, const Tensor& self, double factor);
TORCH_API void record_add(Tensor& out, const Tensor& a, const Tensor& b);
TORCH_API void record_sum(Tensor& out, const Tensor& self);
TORCH_API void record_index(Tensor& out, const Tensor& self, const std::vector<Tensor>& indices);

}  // namespace torch::autograd
