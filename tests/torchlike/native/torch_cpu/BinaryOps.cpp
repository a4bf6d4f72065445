// Mirrors aten/src/ATen/native/BinaryOps.cpp and UnaryOps.cpp: the type promotion of
// TensorIterator (result_type), broadcasting of a 1-element operand (python scalars arrive as
// wrapped 0-dim CPU tensors and are read at launch, as TensorIterator passes CPU scalars to CUDA
// kernels as arguments), one kernel per op run where the output lives.
#include <cmath>

#include "torchlike/aten.h"

namespace at {

double apply_binary(BinaryOp op, double a, double b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Gt:
      return a > b;
    case BinaryOp::Lt:
      return a < b;
    case BinaryOp::Ge:
      return a >= b;
    case BinaryOp::Le:
      return a <= b;
    case BinaryOp::Eq:
      return a == b;
    case BinaryOp::Ne:
      return a != b;
    case BinaryOp::And:
      return (a != 0) && (b != 0);
    case BinaryOp::Or:
      return (a != 0) || (b != 0);
  }
  return 0;
}

double apply_unary(UnaryOp op, double a) {
  switch (op) {
    case UnaryOp::Neg:
      return -a;
    case UnaryOp::Abs:
      return std::fabs(a);
    case UnaryOp::Ceil:
      return std::ceil(a);
    case UnaryOp::IsFinite:
      return std::isfinite(a);
    case UnaryOp::Not:
      return a == 0;
  }
  return 0;
}

namespace {

bool is_comparison(BinaryOp op) {
  return op == BinaryOp::Gt || op == BinaryOp::Lt || op == BinaryOp::Ge || op == BinaryOp::Le || op == BinaryOp::Eq ||
         op == BinaryOp::Ne;
}

bool is_wrapped_scalar(const Tensor& t) { return t.dim() == 0 && t.is_cpu(); }

int rank(ScalarType t) {
  switch (t) {
    case kBool:
      return 0;
    case kInt:
      return 1;
    case kLong:
      return 2;
    case kFloat:
      return 3;
    case kDouble:
      return 4;
  }
  return 0;
}

// Mirrors at::native::result_type: a wrapped number does not raise a tensor's floating type.
ScalarType result_type(const Tensor& a, const Tensor& b, BinaryOp op) {
  if (op == BinaryOp::And || op == BinaryOp::Or) return a.scalar_type();
  ScalarType ta = a.scalar_type(), tb = b.scalar_type();
  ScalarType t;
  if (is_wrapped_scalar(b) && !is_wrapped_scalar(a)) {
    t = (c10::isFloatingType(tb) && !c10::isFloatingType(ta)) ? kFloat : ta;
  } else if (is_wrapped_scalar(a) && !is_wrapped_scalar(b)) {
    t = (c10::isFloatingType(ta) && !c10::isFloatingType(tb)) ? kFloat : tb;
  } else {
    t = rank(ta) >= rank(tb) ? ta : tb;
  }
  if (op == BinaryOp::Div && !c10::isFloatingType(t)) t = kFloat;
  if (op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul) {
    if (t == kBool) t = kLong;
  }
  return t;
}

Tensor binary(const Tensor& a, const Tensor& b, BinaryOp op) {
  const Tensor& shaped = (a.numel() == 1 && b.numel() != 1) || (is_wrapped_scalar(a) && !is_wrapped_scalar(b)) ? b : a;
  const Tensor& other = &shaped == &a ? b : a;
  TORCH_CHECK(other.numel() == 1 || other.sizes() == shaped.sizes(),
              "The size of tensor a must match the size of tensor b (broadcasting of 1-element operands only)");
  TORCH_CHECK(a.device_type() == b.device_type() || is_wrapped_scalar(a) || is_wrapped_scalar(b),
              "Expected all tensors to be on the same device");
  const DeviceType device = is_wrapped_scalar(shaped) ? other.device_type() : shaped.device_type();
  Tensor out = at::empty(shaped.sizes(), is_comparison(op) ? kBool : result_type(a, b, op), device);
  native::binary_kernel(out, a, b, op);
  return out;
}

Tensor unary(const Tensor& self, UnaryOp op) {
  const ScalarType dtype = (op == UnaryOp::IsFinite || op == UnaryOp::Not) ? kBool : self.scalar_type();
  Tensor out = at::empty(self.sizes(), dtype, self.device_type());
  detail::launch_on(self.device_type(), [out = at::detail::kernel_arg(out), self = at::detail::kernel_arg(self), op] {
    for (int64_t i = 0, n = out.numel(); i < n; ++i) store(out, i, apply_unary(op, load(self, i)));
  });
  return out;
}

}  // namespace

namespace native {

// Mirrors the gpu_kernel / cpu_kernel loops of TensorIterator: a wrapped scalar is read now.
void binary_kernel(const Tensor& out, const Tensor& a, const Tensor& b, BinaryOp op) {
  const bool a_scalar = is_wrapped_scalar(a), b_scalar = is_wrapped_scalar(b);
  const double a_value = a_scalar ? load(a, 0) : 0, b_value = b_scalar ? load(b, 0) : 0;
  detail::launch_on(out.device_type(), [out = at::detail::kernel_arg(out), a = at::detail::kernel_arg(a),
                                        b = at::detail::kernel_arg(b), a_scalar, b_scalar, a_value, b_value, op] {
    const int64_t n = out.numel();
    for (int64_t i = 0; i < n; ++i) {
      const double x = a_scalar ? a_value : load(a, a.numel() == 1 ? 0 : i);
      const double y = b_scalar ? b_value : load(b, b.numel() == 1 ? 0 : i);
      store(out, i, apply_binary(op, x, y));
    }
  });
}

}  // namespace native

namespace _ops {

#define TORCHLIKE_DEFINE_BINARY(op, name) \
  Tensor op::call(const Tensor& self, const Tensor& other) { return binary(self, other, BinaryOp::name); }
TORCHLIKE_BINARY_OPS(TORCHLIKE_DEFINE_BINARY)
#undef TORCHLIKE_DEFINE_BINARY
#define TORCHLIKE_DEFINE_UNARY(op, name) \
  Tensor op::call(const Tensor& self) { return unary(self, UnaryOp::name); }
TORCHLIKE_UNARY_OPS(TORCHLIKE_DEFINE_UNARY)
#undef TORCHLIKE_DEFINE_UNARY

}  // namespace _ops
}  // namespace at
