// Mirrors aten/src/ATen/native/ReduceOps.cpp: sum / all / any / max / min over all dimensions or
// one, and cumsum; the reduction kernel runs where the input lives.
#include <algorithm>
#include <limits>

#include "torchlike/aten.h"

namespace at {
namespace native {

Tensor reduce(const Tensor& self, ReduceOp op, std::vector<int64_t> dims, bool keepdim) {
  TORCH_CHECK(dims.size() <= 1, "reductions over one dimension or all of them");
  ScalarType dtype = self.scalar_type();
  if (op == ReduceOp::All || op == ReduceOp::Any) dtype = kBool;
  if (op == ReduceOp::Sum && (dtype == kBool || dtype == kInt)) dtype = kLong;
  int64_t outer = 1, extent = self.numel(), inner = 1;
  std::vector<int64_t> out_sizes;
  if (!dims.empty()) {
    const int64_t d = dims[0] < 0 ? dims[0] + self.dim() : dims[0];
    TORCH_CHECK(d >= 0 && d < self.dim(), "Dimension out of range");
    outer = 1;
    inner = 1;
    for (int64_t i = 0; i < d; ++i) outer *= self.size(i);
    extent = self.size(d);
    for (int64_t i = d + 1; i < self.dim(); ++i) inner *= self.size(i);
    for (int64_t i = 0; i < self.dim(); ++i) {
      if (i != d) out_sizes.push_back(self.size(i));
      else if (keepdim) out_sizes.push_back(1);
    }
  }
  TORCH_CHECK(!(op == ReduceOp::Max || op == ReduceOp::Min) || self.numel() > 0,
              "max(): Expected reduction dim to be specified for input.numel() == 0.");
  Tensor out = at::empty(out_sizes, dtype, self.device_type());
  detail::launch_on(self.device_type(),
                    [out = at::detail::kernel_arg(out), self = at::detail::kernel_arg(self), outer, inner, extent, op] {
                      for (int64_t o = 0; o < outer; ++o)
                        for (int64_t in = 0; in < inner; ++in) {
                          double acc = op == ReduceOp::All   ? 1
                                       : op == ReduceOp::Max ? -std::numeric_limits<double>::infinity()
                                       : op == ReduceOp::Min ? std::numeric_limits<double>::infinity()
                                                             : 0;
                          for (int64_t e = 0; e < extent; ++e) {
                            const double v = load(self, (o * extent + e) * inner + in);
                            switch (op) {
                              case ReduceOp::Sum:
                                acc += v;
                                break;
                              case ReduceOp::All:
                                acc = acc != 0 && v != 0;
                                break;
                              case ReduceOp::Any:
                                acc = acc != 0 || v != 0;
                                break;
                              case ReduceOp::Max:
                                acc = std::max(acc, v);
                                break;
                              case ReduceOp::Min:
                                acc = std::min(acc, v);
                                break;
                            }
                          }
                          store(out, o * inner + in, acc);
                        }
                    });
  return out;
}

}  // namespace native

namespace _ops {

Tensor sum_dim_IntList::call(const Tensor& self, std::vector<int64_t> dims, bool keepdim) {
  return native::reduce(self, ReduceOp::Sum, std::move(dims), keepdim);
}
Tensor all::call(const Tensor& self) { return native::reduce(self, ReduceOp::All, {}, false); }
Tensor any::call(const Tensor& self) { return native::reduce(self, ReduceOp::Any, {}, false); }
Tensor max::call(const Tensor& self) { return native::reduce(self, ReduceOp::Max, {}, false); }
Tensor min::call(const Tensor& self) { return native::reduce(self, ReduceOp::Min, {}, false); }

Tensor cumsum::call(const Tensor& self, int64_t dim) {
  TORCH_CHECK(self.dim() == 1 && (dim == 0 || dim == -1), "cumsum of 1-d tensors only");
  Tensor out = at::empty(self.sizes(), self.scalar_type() == kBool ? kLong : self.scalar_type(), self.device_type());
  detail::launch_on(self.device_type(), [out = at::detail::kernel_arg(out), self = at::detail::kernel_arg(self)] {
    double acc = 0;
    for (int64_t i = 0, n = self.numel(); i < n; ++i) store(out, i, acc += load(self, i));
  });
  return out;
}

}  // namespace _ops
}  // namespace at
