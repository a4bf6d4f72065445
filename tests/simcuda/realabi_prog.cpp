// Linked against the REAL libcudart.so.13 and libnccl.so.2 at build time; run with
// LD_LIBRARY_PATH pointing at the simulation it must bind to the simulated libraries (their
// sonames and symbol versions match). Exits 0 when it ran on the simulation.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>

int main() {
  if (dlsym(RTLD_DEFAULT, "simcudaBusy") == nullptr) {
    std::fprintf(stderr, "not running on the simulated libcudart\n");
    return 2;
  }
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 3;
  char src[64] = "hello from the simulated runtime", dst[64] = {};
  void* dev = nullptr;
  if (cudaMalloc(&dev, sizeof(src)) != cudaSuccess) return 4;
  if (cudaMemcpy(dev, src, sizeof(src), cudaMemcpyHostToDevice) != cudaSuccess) return 5;
  if (cudaMemcpy(dst, dev, sizeof(src), cudaMemcpyDeviceToHost) != cudaSuccess) return 6;
  if (std::strcmp(src, dst) != 0) return 7;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, dev) != cudaSuccess || attr.type != cudaMemoryTypeDevice) return 8;
  cudaFree(dev);
  std::printf("ok\n");
  return 0;
}
