// A C++ program with synchronisations at known places: an explicit one in its own function, and
// hidden ones (Tensor.item() through the stand-in framework) two and three calls deep.
#include <cuda_runtime_api.h>

#include <cstdio>

extern "C" {
int ft_init();
double ft_item();
}

namespace planted {

cudaStream_t g_stream;

__attribute__((noinline)) void drain_queue() {
  cudaStreamSynchronize(g_stream);  // NATIVE_EXPLICIT_LINE
}

__attribute__((noinline)) double read_loss(int step) {
  return ft_item() + step;  // NATIVE_ITEM_LINE
}

__attribute__((noinline)) double log_metrics(int step) { return read_loss(step) * 2; }

}  // namespace planted

int main() {
  if (ft_init() != 0 || cudaStreamCreate(&planted::g_stream) != cudaSuccess) return 1;
  double total = 0;
  for (int step = 0; step < 8; ++step) {
    total += planted::log_metrics(step);
    planted::drain_queue();
  }
  std::printf("total %.1f\n", total);
  return 0;
}
