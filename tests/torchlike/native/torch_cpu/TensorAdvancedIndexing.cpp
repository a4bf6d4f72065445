// Mirrors aten/src/ATen/native/TensorAdvancedIndexing.cpp and IndexingUtils.h: a boolean mask
// index is turned into positions by nonzero() (expandTensors, under make_info) before any
// kernel can be sized; masked_select is index with the mask; index_put_ (the backward of
// x[mask]) expands the mask the same way. Also the views (select, slice, view) and stack.
#include <algorithm>
#include <cstring>

#include "torchlike/aten.h"

namespace at {
namespace {

// Mirrors expandTensors (IndexingUtils.h): a bool/byte mask becomes its nonzero() positions.
TORCHLIKE_FRAME std::vector<Tensor> expandTensors(const Tensor& self, const std::vector<Tensor>& indices) {
  std::vector<Tensor> result;
  for (const Tensor& index : indices) {
    TORCH_CHECK(index.scalar_type() == kBool, "indexing with boolean masks only");
    TORCH_CHECK(index.sizes() == self.sizes(), "The shape of the mask must match the indexed tensor");
    result.push_back(index.nonzero());
  }
  return result;
}

// Mirrors make_info: the expanded indices of an advanced index.
TORCHLIKE_FRAME Tensor make_info(const Tensor& self, const std::vector<Tensor>& indices) {
  TORCH_CHECK(indices.size() == 1, "one mask index only");
  return expandTensors(self, indices)[0];
}

// Position k of a nonzero() result (shape [count, ndim]) as a linear element index of self.
int64_t linear_index(const Tensor& self, const Tensor& positions, int64_t k) {
  const int64_t ndim = positions.dim() == 2 ? positions.size(1) : 1;
  int64_t linear = 0;
  for (int64_t d = 0; d < ndim; ++d)
    linear = linear * self.size(d) + static_cast<int64_t>(load(positions, k * ndim + d));
  return linear;
}

// Mirrors _index_put_impl_: expand, then the scatter kernel.
TORCHLIKE_FRAME Tensor& _index_put_impl_(Tensor& self, const std::vector<Tensor>& indices, const Tensor& values,
                                         bool accumulate) {
  Tensor positions = expandTensors(self, indices)[0];
  native::index_put_with_positions(self, positions, values, accumulate);
  return self;
}

}  // namespace

namespace meta {
// Mirrors the structured kernel's meta function of index.Tensor (TORCH_META_FUNC2(index, Tensor)).
struct TORCH_API structured_index_Tensor {
  static Tensor meta(const Tensor& self, const std::vector<Tensor>& indices);
};
TORCHLIKE_FRAME Tensor structured_index_Tensor::meta(const Tensor& self, const std::vector<Tensor>& indices) {
  return make_info(self, indices);
}
}  // namespace meta

namespace native {

// Mirrors nonzero_cpu.
TORCH_API TORCHLIKE_FRAME Tensor nonzero_cpu(const Tensor& self) {
  int64_t count = 0;
  for (int64_t i = 0, n = self.numel(); i < n; ++i) count += load(self, i) != 0;
  const int64_t ndim = self.dim();
  Tensor out = at::empty({count, ndim}, kLong, kCPU);
  int64_t k = 0;
  for (int64_t i = 0, n = self.numel(); i < n; ++i) {
    if (load(self, i) == 0) continue;
    int64_t rest = i;
    for (int64_t d = ndim - 1; d >= 0; --d) {
      store(out, k * ndim + d, static_cast<double>(rest % self.size(d)));
      rest /= self.size(d);
    }
    ++k;
  }
  return out;
}

// The gather of index_kernel: out[k] = self[positions[k]].
TORCH_API void index_gather_kernel(const Tensor& out, const Tensor& self, const Tensor& positions) {
  detail::launch_on(self.device_type(), [out = at::detail::kernel_arg(out), self = at::detail::kernel_arg(self),
                                         positions = at::detail::kernel_arg(positions)] {
    for (int64_t k = 0, n = out.numel(); k < n; ++k) store(out, k, load(self, linear_index(self, positions, k)));
  });
}

TORCH_API Tensor index_put_with_positions(Tensor& self, const Tensor& positions, const Tensor& values,
                                          bool accumulate) {
  // A CPU scalar value is a kernel argument, read now (as TensorIterator passes it).
  const bool scalar = values.is_cpu() && !self.is_cpu();
  const double scalar_value = scalar ? load(values, 0) : 0;
  Tensor target = self;
  detail::launch_on(self.device_type(),
                    [target = at::detail::kernel_arg(target), positions = at::detail::kernel_arg(positions),
                     values = at::detail::kernel_arg(values), accumulate, scalar, scalar_value] {
                      for (int64_t k = 0, n = positions.size(0); k < n; ++k) {
                        const int64_t i = linear_index(target, positions, k);
                        const double v = scalar ? scalar_value : load(values, values.numel() == 1 ? 0 : k);
                        store(target, i, accumulate ? load(target, i) + v : v);
                      }
                    });
  return self;
}

// Mirrors TORCH_IMPL_FUNC(index_out): meta (expand the mask), then the index kernel.
TORCH_API TORCHLIKE_FRAME Tensor index_out(const Tensor& self, const std::vector<Tensor>& indices) {
  Tensor positions = meta::structured_index_Tensor::meta(self, indices);
  Tensor result = at::empty({positions.size(0)}, self.scalar_type(), self.device_type());
  index_gather_kernel(result, self, positions);
  return result;
}

// Mirrors at::native::index_put_.
TORCH_API TORCHLIKE_FRAME Tensor& index_put_(Tensor& self, const std::vector<Tensor>& indices, const Tensor& values,
                                             bool accumulate) {
  return _index_put_impl_(self, indices, values, accumulate);
}

// Mirrors masked_select_cpu.
TORCH_API TORCHLIKE_FRAME Tensor masked_select_cpu(const Tensor& self, const Tensor& mask) {
  return index_out(self, {mask});
}

}  // namespace native

namespace _ops {

TORCHLIKE_FRAME Tensor nonzero::call(const Tensor& self) {
  if (self.is_cuda()) return detail::cuda_kernels().nonzero(self);
  return native::nonzero_cpu(self);
}

TORCHLIKE_FRAME Tensor index_Tensor::call(const Tensor& self, const std::vector<Tensor>& indices) {
  if (self.is_cuda()) return detail::cuda_kernels().index_Tensor(self, indices);
  return native::index_out(self, indices);
}

TORCHLIKE_FRAME Tensor& index_put_::call(Tensor& self, const std::vector<Tensor>& indices, const Tensor& values,
                                         bool accumulate) {
  return native::index_put_(self, indices, values, accumulate);
}

TORCHLIKE_FRAME Tensor masked_select::call(const Tensor& self, const Tensor& mask) {
  if (self.is_cuda()) return detail::cuda_kernels().masked_select(self, mask);
  return native::masked_select_cpu(self, mask);
}

Tensor select_int::call(const Tensor& self, int64_t dim, int64_t index) {
  TORCH_CHECK(dim == 0 && self.dim() >= 1, "select along the first dimension only");
  const int64_t n = self.size(0);
  if (index < 0) index += n;
  TORCH_CHECK(index >= 0 && index < n, "index out of range");
  auto impl = std::make_shared<TensorImpl>(*self.impl());
  impl->sizes.erase(impl->sizes.begin());
  impl->requires_grad = false;
  impl->grad_fn = nullptr;
  impl->grad = nullptr;
  Tensor out(impl);
  impl->offset_bytes += static_cast<std::size_t>(index) * out.nbytes();
  return out;
}

Tensor slice_Tensor::call(const Tensor& self, int64_t dim, int64_t start, int64_t end) {
  TORCH_CHECK(dim == 0 && self.dim() >= 1, "slices along the first dimension only");
  const int64_t n = self.size(0);
  start = std::max<int64_t>(0, std::min(n, start < 0 ? start + n : start));
  end = std::max<int64_t>(start, std::min(n, end < 0 ? end + n : end));
  auto impl = std::make_shared<TensorImpl>(*self.impl());
  impl->requires_grad = false;
  impl->grad_fn = nullptr;
  impl->grad = nullptr;
  const std::size_t row_bytes = self.numel() == 0 ? 0 : self.nbytes() / static_cast<std::size_t>(n);
  impl->offset_bytes += static_cast<std::size_t>(start) * row_bytes;
  impl->sizes[0] = end - start;
  return Tensor(impl);
}

Tensor view::call(const Tensor& self, const std::vector<int64_t>& size) {
  int64_t numel = 1;
  for (int64_t s : size) numel *= s;
  TORCH_CHECK(numel == self.numel(), "shape is invalid for input of this size");
  auto impl = std::make_shared<TensorImpl>(*self.impl());
  impl->sizes = size;
  impl->requires_grad = false;
  impl->grad_fn = nullptr;
  impl->grad = nullptr;
  return Tensor(impl);
}

Tensor stack::call(const std::vector<Tensor>& tensors) {
  TORCH_CHECK(!tensors.empty(), "stack expects a non-empty TensorList");
  std::vector<int64_t> sizes = tensors[0].sizes();
  sizes.insert(sizes.begin(), static_cast<int64_t>(tensors.size()));
  Tensor out = at::empty(sizes, tensors[0].scalar_type(), tensors[0].device_type());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    Tensor row = out.select(0, static_cast<int64_t>(i));
    row.copy_(tensors[i]);
  }
  return out;
}

}  // namespace _ops
}  // namespace at
