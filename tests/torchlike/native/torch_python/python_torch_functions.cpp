// Mirrors torch/csrc/autograd/generated/python_torch_functions.cpp (torch.* functions) and
// torch/csrc/utils/tensor_new.cpp (torch.tensor), torch/csrc/utils/tensor_list.cpp
// (tensor_to_list).
#include <tuple>

#include "python_bindings.h"

namespace torch {
namespace utils {

// Mirrors tensor_to_list: a tensor not on the CPU is copied there (toBackend(CPU)) before its
// elements are read.
TORCHLIKE_FRAME at::Tensor tensor_to_list(const at::Tensor& tensor) {
  if (tensor.is_cpu()) return tensor;
  return at::_ops::to_dtype_layout::call(tensor, tensor.scalar_type(), at::kCPU, false, false, false);
}

}  // namespace utils

// Static functions of torch::autograd, as in the generated binding files.
namespace autograd {

using at::Tensor;

std::vector<int64_t> shape(const int64_t* sizes, int64_t ndim) { return {sizes, sizes + ndim}; }

static TORCHLIKE_FRAME void* THPVariable_empty(const int64_t* sizes, int64_t ndim, int64_t dtype, int64_t device,
                                               int64_t pin_memory) {
  HANDLE_TH_ERRORS
  return wrap(at::empty(shape(sizes, ndim), static_cast<at::ScalarType>(dtype), static_cast<at::DeviceType>(device),
                        pin_memory != 0));
  END_HANDLE_TH_ERRORS(nullptr)
}

// torch.full / zeros / ones: empty + fill_.
static TORCHLIKE_FRAME void* THPVariable_full(const int64_t* sizes, int64_t ndim, double value, int64_t dtype,
                                              int64_t device) {
  HANDLE_TH_ERRORS
  Tensor t = at::empty(shape(sizes, ndim), static_cast<at::ScalarType>(dtype), static_cast<at::DeviceType>(device));
  at::_ops::fill__Scalar::call(t, {value, at::kDouble});
  return wrap(t);
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_randn(const int64_t* sizes, int64_t ndim, int64_t dtype, int64_t device) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::randn::call(shape(sizes, ndim), static_cast<at::ScalarType>(dtype),
                                    static_cast<at::DeviceType>(device)));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_randint(int64_t low, int64_t high, const int64_t* sizes, int64_t ndim,
                                                 int64_t device) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::randint_low::call(low, high, shape(sizes, ndim), static_cast<at::DeviceType>(device)));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_arange(double start, double end, double step, int64_t dtype, int64_t device) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::arange_start_step::call({start, at::kDouble}, {end, at::kDouble}, {step, at::kDouble},
                                                static_cast<at::ScalarType>(dtype),
                                                static_cast<at::DeviceType>(device)));
  END_HANDLE_TH_ERRORS(nullptr)
}

// Mirrors torch::utils::tensor_ctor: the data is built on the CPU, then moved (a blocking copy).
static TORCHLIKE_FRAME void* THPVariable_tensor(const double* values, const int64_t* sizes, int64_t ndim, int64_t dtype,
                                                int64_t device) {
  HANDLE_TH_ERRORS
  Tensor cpu = at::empty(shape(sizes, ndim), static_cast<at::ScalarType>(dtype), at::kCPU);
  for (int64_t i = 0, n = cpu.numel(); i < n; ++i) at::store(cpu, i, values[i]);
  if (device == static_cast<int64_t>(at::kCPU)) return wrap(cpu);
  return wrap(at::_ops::to_device::call(cpu, at::kCUDA, cpu.scalar_type(), false, false));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_nonzero(void* self) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::nonzero::call(unpack(self)));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_masked_select(void* self, void* mask) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::masked_select::call(unpack(self), unpack(mask)));
  END_HANDLE_TH_ERRORS(nullptr)
}

// torch._unique2: the values; the counts through `counts_out` when asked for.
static TORCHLIKE_FRAME void* THPVariable__unique2(void* self, int64_t return_counts, void** counts_out) {
  HANDLE_TH_ERRORS
  auto [values, inverse, counts] = at::_ops::_unique2::call(unpack(self), true, false, return_counts != 0);
  if (return_counts) *counts_out = wrap(counts);
  return wrap(values);
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_repeat_interleave(void* repeats) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::repeat_interleave_Tensor::call(unpack(repeats)));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME int64_t THPVariable_equal(void* self, void* other) {
  HANDLE_TH_ERRORS
  return at::_ops::equal::call(unpack(self), unpack(other)) ? 1 : 0;
  END_HANDLE_TH_ERRORS(-1)
}

static TORCHLIKE_FRAME void* THPVariable_bincount(void* self, int64_t minlength) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::bincount::call(unpack(self), minlength));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_histc(void* self, int64_t bins, double min, double max) {
  HANDLE_TH_ERRORS
  return wrap(at::_ops::histc::call(unpack(self), bins, {min, at::kDouble}, {max, at::kDouble}));
  END_HANDLE_TH_ERRORS(nullptr)
}

static TORCHLIKE_FRAME void* THPVariable_stack(void** tensors, int64_t count) {
  HANDLE_TH_ERRORS
  std::vector<Tensor> list;
  for (int64_t i = 0; i < count; ++i) list.push_back(unpack(tensors[i]));
  return wrap(at::_ops::stack::call(list));
  END_HANDLE_TH_ERRORS(nullptr)
}

}  // namespace autograd
using namespace autograd;

namespace {
const MethodDef torch_functions[] = {
    {"empty", "p:pllll", reinterpret_cast<void*>(THPVariable_empty)},
    {"full", "p:pldll", reinterpret_cast<void*>(THPVariable_full)},
    {"randn", "p:plll", reinterpret_cast<void*>(THPVariable_randn)},
    {"randint", "p:llpll", reinterpret_cast<void*>(THPVariable_randint)},
    {"arange", "p:dddll", reinterpret_cast<void*>(THPVariable_arange)},
    {"tensor",
     "p:ppll"
     "l",
     reinterpret_cast<void*>(THPVariable_tensor)},
    {"nonzero", "p:p", reinterpret_cast<void*>(THPVariable_nonzero)},
    {"masked_select", "p:pp", reinterpret_cast<void*>(THPVariable_masked_select)},
    {"_unique2", "p:plp", reinterpret_cast<void*>(THPVariable__unique2)},
    {"repeat_interleave", "p:p", reinterpret_cast<void*>(THPVariable_repeat_interleave)},
    {"equal", "l:pp", reinterpret_cast<void*>(THPVariable_equal)},
    {"bincount", "p:pl", reinterpret_cast<void*>(THPVariable_bincount)},
    {"histc", "p:pldd", reinterpret_cast<void*>(THPVariable_histc)},
    {"stack", "p:pl", reinterpret_cast<void*>(THPVariable_stack)},
    {nullptr, nullptr, nullptr},
};
const RegisterMethods register_torch_functions(torch_functions);
}  // namespace

}  // namespace torch
