// Mirrors torch/csrc/autograd/python_variable_methods.cpp (and python_variable_indexing.cpp for
// THPVariable_getitem): the Tensor methods. The autograd history that the generated
// VariableType kernels record in the real tree is recorded here, after the op.
#include "python_bindings.h"
#include "torchlike/c10_cuda.h"

namespace torch {
namespace utils {
TORCHLIKE_FRAME at::Tensor tensor_to_list(const at::Tensor& tensor);
}
// Static functions of torch::autograd, as in the generated binding files.
namespace autograd {

using at::Tensor;

static at::Tensor scalar_operand(void* other, double value, int64_t dtype) {
  return other ? unpack(other) : at::wrapped_scalar({value, static_cast<at::ScalarType>(dtype)});
}

// Mirrors dispatch_to<T> + THPVariable_item: the element as a double (Python converts).
static TORCHLIKE_FRAME double THPVariable_item(void* self) {
  HANDLE_TH_ERRORS
  return unpack(self).item().value;
  END_HANDLE_TH_ERRORS(0)
}

// Mirrors THPVariable_float_scalar (float(t)) and THPVariable_integral_scalar (int(t)).
static TORCHLIKE_FRAME double THPVariable_float_scalar(void* self) {
  HANDLE_TH_ERRORS
  return unpack(self).item().value;
  END_HANDLE_TH_ERRORS(0)
}
static TORCHLIKE_FRAME double THPVariable_integral_scalar(void* self) {
  HANDLE_TH_ERRORS
  return unpack(self).item().value;
  END_HANDLE_TH_ERRORS(0)
}

// Mirrors THPVariable_is_nonzero, and THPVariable_bool_scalar (bool(t), `if t:`) which calls it.
static TORCHLIKE_FRAME int64_t THPVariable_is_nonzero(void* self) {
  HANDLE_TH_ERRORS
  return at::_ops::is_nonzero::call(unpack(self)) ? 1 : 0;
  END_HANDLE_TH_ERRORS(-1)
}
static TORCHLIKE_FRAME int64_t THPVariable_bool_scalar(void* self) { return THPVariable_is_nonzero(self); }

// Mirrors THPVariable_cpu: dispatch_to(self, kCPU) -> Tensor::to(options) -> to.dtype_layout.
static TORCHLIKE_FRAME void* THPVariable_cpu(void* self) {
  HANDLE_TH_ERRORS
  const Tensor& t = unpack(self);
  return wrap(at::_ops::to_dtype_layout::call(t, t.scalar_type(), at::kCPU, false, false, false));
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors THPVariable_to (and THPVariable_cuda, which calls the same dispatch_to): to.device.
static TORCHLIKE_FRAME void* THPVariable_to(void* self, int64_t device, int64_t dtype, int64_t non_blocking,
                                            int64_t copy) {
  HANDLE_TH_ERRORS
  const Tensor& t = unpack(self);
  const auto target_device = device < 0 ? t.device_type() : static_cast<at::DeviceType>(device);
  const auto target_dtype = dtype < 0 ? t.scalar_type() : static_cast<at::ScalarType>(dtype);
  return wrap(at::_ops::to_device::call(t, target_device, target_dtype, non_blocking != 0, copy != 0));
  END_HANDLE_TH_ERRORS(nullptr)
}
static TORCHLIKE_FRAME void* THPVariable_cuda(void* self, int64_t non_blocking) {
  HANDLE_TH_ERRORS
  const Tensor& t = unpack(self);
  return wrap(at::_ops::to_device::call(t, at::kCUDA, t.scalar_type(), non_blocking != 0, false));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_pin_memory(void* self) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::pin_memory::call(unpack(self)));
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors THPVariable_tolist: torch::utils::tensor_to_list; the CPU copy comes back and the
// package reads its elements.
static TORCHLIKE_FRAME void* THPVariable_tolist(void* self) {
  HANDLE_TH_ERRORS
  return wrap(utils::tensor_to_list(unpack(self)));
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors THPVariable_getitem: an int selects, a slice views, a bool tensor is an advanced
// index (index.Tensor).
static TORCHLIKE_FRAME void* THPVariable_getitem(void* self, int64_t kind, void* index, int64_t start, int64_t stop) {
  HANDLE_TH_ERRORS
  const Tensor& t = unpack(self);
  if (kind == 0) return wrap(at::_ops::select_int::call(t, 0, start));
  if (kind == 1) return wrap(at::_ops::slice_Tensor::call(t, 0, start, stop));
  const std::vector<Tensor> indices{unpack(index)};
  Tensor out = at::_ops::index_Tensor::call(t, indices);
  autograd::record_index(out, t, indices);
  return wrap(out);
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors THPVariable_setitem for a bool mask with a scalar (index_put_).
static TORCHLIKE_FRAME int64_t THPVariable_setitem(void* self, void* mask, double value) {
  HANDLE_TH_ERRORS
  Tensor& t = unpack(self);
  at::_ops::index_put_::call(t, {unpack(mask)}, at::wrapped_scalar({value, at::kDouble}), false);
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

#define TORCHLIKE_BINARY_BINDING(op, name)                                                              \
  static TORCHLIKE_FRAME void* THPVariable_##op(void* self, void* other, double value, int64_t dtype) { \
    HANDLE_TH_ERRORS                                                                                    \
    const Tensor& a = unpack(self);                                                                     \
    const Tensor b = scalar_operand(other, value, dtype);                                               \
    Tensor out = at::_ops::op::call(a, b);                                                              \
    if (at::BinaryOp::name == at::BinaryOp::Mul && !other) autograd::record_mul_scalar(out, a, value);  \
    if (at::BinaryOp::name == at::BinaryOp::Add && other) autograd::record_add(out, a, b);              \
    return wrap(out);                                                                                   \
    END_HANDLE_TH_ERRORS(nullptr)                                                                       \
  }
TORCHLIKE_BINARY_OPS(TORCHLIKE_BINARY_BINDING)
#undef TORCHLIKE_BINARY_BINDING

#define TORCHLIKE_UNARY_BINDING(op, name)                     \
  static TORCHLIKE_FRAME void* THPVariable_##op(void* self) { \
    HANDLE_TH_ERRORS                                          \
    return wrap(at::_ops::op::call(unpack(self)));            \
    END_HANDLE_TH_ERRORS(nullptr)                             \
  }
TORCHLIKE_UNARY_OPS(TORCHLIKE_UNARY_BINDING)
#undef TORCHLIKE_UNARY_BINDING

// In-place multiply by a scalar (Tensor.mul_): the kernel writes its own input.
static TORCHLIKE_FRAME int64_t THPVariable_mul_(void* self, double value) {
  HANDLE_TH_ERRORS
  const Tensor& t = unpack(self);
  at::native::binary_kernel(t, t, at::wrapped_scalar({value, at::kDouble}), at::BinaryOp::Mul);
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

static TORCHLIKE_FRAME void* THPVariable_sum(void* self, int64_t has_dim, int64_t dim, int64_t keepdim) {
  HANDLE_TH_ERRORS
  const Tensor& t = unpack(self);
  std::vector<int64_t> dims;
  if (has_dim) dims.push_back(dim);
  Tensor out = at::_ops::sum_dim_IntList::call(t, dims, keepdim != 0);
  if (!has_dim) autograd::record_sum(out, t);
  return wrap(out);
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_reduce(void* self, int64_t op) {
  HANDLE_TH_ERRORS
  const Tensor& t = unpack(self);
  switch (static_cast<at::ReduceOp>(op)) {
    case at::ReduceOp::All:
      return wrap(at::_ops::all::call(t));
    case at::ReduceOp::Any:
      return wrap(at::_ops::any::call(t));
    case at::ReduceOp::Max:
      return wrap(at::_ops::max::call(t));
    case at::ReduceOp::Min:
      return wrap(at::_ops::min::call(t));
    case at::ReduceOp::Sum:
      return wrap(at::_ops::sum_dim_IntList::call(t, {}, false));
  }
  return nullptr;
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_cumsum(void* self, int64_t dim) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::cumsum::call(unpack(self), dim));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_clone(void* self) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::clone::call(unpack(self)));
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors THPVariable_detach: the same storage, no history.
static TORCHLIKE_FRAME void* THPVariable_detach(void* self) {
  HANDLE_TH_ERRORS
  auto impl = std::make_shared<at::TensorImpl>(*unpack(self).impl());
  impl->requires_grad = false;
  impl->grad_fn = nullptr;
  impl->grad = nullptr;
  return wrap(Tensor(impl));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_view(void* self, const int64_t* sizes, int64_t ndim) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::view::call(unpack(self), std::vector<int64_t>(sizes, sizes + ndim)));
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors THPVariable_record_stream: the caching allocator keeps the block for that stream.
static TORCHLIKE_FRAME int64_t THPVariable_record_stream(void* self, void* stream) {
  HANDLE_TH_ERRORS
  c10::cuda::CUDACachingAllocator::recordStream(unpack(self).impl()->storage->data,
                                                c10::cuda::CUDAStream(static_cast<cudaStream_t>(stream)));
  return 0;
  END_HANDLE_TH_ERRORS(-1)
}

// The properties (python_variable.cpp getters) and the deallocator.
static void THPVariable_dealloc(void* self) { delete static_cast<Tensor*>(self); }
static int64_t THPVariable_numel(void* self) { return unpack(self).numel(); }
static int64_t THPVariable_dim(void* self) { return unpack(self).dim(); }
static int64_t THPVariable_size(void* self, int64_t d) { return unpack(self).size(d); }
static int64_t THPVariable_dtype(void* self) { return static_cast<int64_t>(unpack(self).scalar_type()); }
static int64_t THPVariable_device(void* self) { return static_cast<int64_t>(unpack(self).device_type()); }
static void* THPVariable_data_ptr(void* self) { return unpack(self).data_ptr(); }
static int64_t THPVariable_element_size(void* self) { return static_cast<int64_t>(unpack(self).element_size()); }
static int64_t THPVariable_is_pinned(void* self) { return unpack(self).is_pinned(); }
static int64_t THPVariable_get_requires_grad(void* self) { return unpack(self).requires_grad(); }
static int64_t THPVariable_set_requires_grad(void* self, int64_t value) {
  unpack(self).unsafeGetTensorImpl()->requires_grad = value != 0;
  return 0;
}
static void* THPVariable_get_grad(void* self) {
  const auto& grad = unpack(self).unsafeGetTensorImpl()->grad;
  return grad ? wrap(Tensor(grad)) : nullptr;
}
static int64_t THPVariable_has_grad_fn(void* self) { return unpack(self).unsafeGetTensorImpl()->grad_fn != nullptr; }

}  // namespace autograd
using namespace autograd;

namespace {
const MethodDef variable_methods[] = {
    {"item", "d:p", reinterpret_cast<void*>(THPVariable_item)},
    {"float_scalar", "d:p", reinterpret_cast<void*>(THPVariable_float_scalar)},
    {"integral_scalar", "d:p", reinterpret_cast<void*>(THPVariable_integral_scalar)},
    {"is_nonzero", "l:p", reinterpret_cast<void*>(THPVariable_is_nonzero)},
    {"bool_scalar", "l:p", reinterpret_cast<void*>(THPVariable_bool_scalar)},
    {"cpu", "p:p", reinterpret_cast<void*>(THPVariable_cpu)},
    {"to", "p:pllll", reinterpret_cast<void*>(THPVariable_to)},
    {"cuda", "p:pl", reinterpret_cast<void*>(THPVariable_cuda)},
    {"pin_memory", "p:p", reinterpret_cast<void*>(THPVariable_pin_memory)},
    {"tolist", "p:p", reinterpret_cast<void*>(THPVariable_tolist)},
    {"getitem", "p:plpll", reinterpret_cast<void*>(THPVariable_getitem)},
    {"setitem", "l:ppd", reinterpret_cast<void*>(THPVariable_setitem)},
#define TORCHLIKE_BINARY_ENTRY(op, name) {#op, "p:ppdl", reinterpret_cast<void*>(THPVariable_##op)},
    TORCHLIKE_BINARY_OPS(TORCHLIKE_BINARY_ENTRY)
#undef TORCHLIKE_BINARY_ENTRY
#define TORCHLIKE_UNARY_ENTRY(op, name) {#op, "p:p", reinterpret_cast<void*>(THPVariable_##op)},
        TORCHLIKE_UNARY_OPS(TORCHLIKE_UNARY_ENTRY)
#undef TORCHLIKE_UNARY_ENTRY
            {"mul_", "l:pd", reinterpret_cast<void*>(THPVariable_mul_)},
    {"sum", "p:plll", reinterpret_cast<void*>(THPVariable_sum)},
    {"reduce", "p:pl", reinterpret_cast<void*>(THPVariable_reduce)},
    {"cumsum", "p:pl", reinterpret_cast<void*>(THPVariable_cumsum)},
    {"clone", "p:p", reinterpret_cast<void*>(THPVariable_clone)},
    {"detach", "p:p", reinterpret_cast<void*>(THPVariable_detach)},
    {"view", "p:ppl", reinterpret_cast<void*>(THPVariable_view)},
    {"record_stream", "l:pp", reinterpret_cast<void*>(THPVariable_record_stream)},
    {"dealloc", "v:p", reinterpret_cast<void*>(THPVariable_dealloc)},
    {"numel", "l:p", reinterpret_cast<void*>(THPVariable_numel)},
    {"dim", "l:p", reinterpret_cast<void*>(THPVariable_dim)},
    {"size", "l:pl", reinterpret_cast<void*>(THPVariable_size)},
    {"dtype", "l:p", reinterpret_cast<void*>(THPVariable_dtype)},
    {"device", "l:p", reinterpret_cast<void*>(THPVariable_device)},
    {"data_ptr", "p:p", reinterpret_cast<void*>(THPVariable_data_ptr)},
    {"element_size", "l:p", reinterpret_cast<void*>(THPVariable_element_size)},
    {"is_pinned", "l:p", reinterpret_cast<void*>(THPVariable_is_pinned)},
    {"get_requires_grad", "l:p", reinterpret_cast<void*>(THPVariable_get_requires_grad)},
    {"set_requires_grad", "l:pl", reinterpret_cast<void*>(THPVariable_set_requires_grad)},
    {"get_grad", "p:p", reinterpret_cast<void*>(THPVariable_get_grad)},
    {"has_grad_fn", "l:p", reinterpret_cast<void*>(THPVariable_has_grad_fn)},
    {nullptr, nullptr, nullptr},
};
const RegisterMethods register_variable_methods(variable_methods);
}  // namespace

}  // namespace torch
