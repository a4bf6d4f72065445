// A C++ program over libtorch (the stand-in's libtorch_cpu / libtorch_cuda) with
// synchronisations at known places: an explicit one in its own function, and a hidden one
// (Tensor::item through at::_ops::item::call) two and three calls deep.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "torchlike/aten.h"

namespace planted {

cudaStream_t g_stream;

__attribute__((noinline)) void drain_queue() {
  cudaStreamSynchronize(g_stream);  // NATIVE_EXPLICIT_LINE
}

__attribute__((noinline)) double read_loss(const at::Tensor& loss, int step) {
  return at::_ops::item::call(loss).to<double>() + step;  // NATIVE_ITEM_LINE
}

__attribute__((noinline)) double log_metrics(const at::Tensor& loss, int step) { return read_loss(loss, step) * 2; }

}  // namespace planted

int main() {
  if (cudaStreamCreate(&planted::g_stream) != cudaSuccess) return 1;
  const at::Tensor weights = at::_ops::randn::call({256}, at::kFloat, at::kCUDA);
  double total = 0;
  for (int step = 0; step < 8; ++step) {
    const at::Tensor loss = at::_ops::sum_dim_IntList::call(weights, {}, false);
    total += planted::log_metrics(loss, step);
    planted::drain_queue();
  }
  std::printf("total %.1f\n", total);
  return 0;
}
