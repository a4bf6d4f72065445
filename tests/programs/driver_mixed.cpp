// driver_mixed [STEPS]: runtime and driver calls in one loop. Under each cudaMemcpy and
// cudaStreamSynchronize the simulated runtime calls the driver's cuMemcpy and cuStreamSynchronize
// (as libcudart does, through pointers of its own), and the program calls cuStreamSynchronize and
// cuEventSynchronize itself. With SIMCUDA_DRIVER_LOOKUP=global the runtime's own driver calls go
// through whatever the global scope defines: it prints whether that is trainshim's hooks.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.hpp"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 3;
  CHECK(cuInit(0));
  void* device = nullptr;
  CHECK(cudaMalloc(&device, 8192));
  cudaStream_t stream = nullptr;
  CHECK(cudaStreamCreate(&stream));
  cudaEvent_t done = nullptr;
  CHECK(cudaEventCreate(&done));
  std::vector<char> batch(4096);
  for (int step = 0; step < steps; ++step) {
    CHECK(cudaMemcpy(device, batch.data(), batch.size(), cudaMemcpyHostToDevice));  // MIXED_RUNTIME_COPY
    CHECK(cudaStreamSynchronize(stream));                                           // MIXED_RUNTIME_SYNC
    CHECK(cuStreamSynchronize(reinterpret_cast<CUstream>(stream)));                 // MIXED_DRIVER_SYNC
    CHECK(cudaEventRecord(done, stream));
    CHECK(cuEventSynchronize(reinterpret_cast<CUevent>(done)));  // MIXED_EVENT_SYNC
  }
  CHECK(cudaEventDestroy(done));
  CHECK(cudaStreamDestroy(stream));
  CHECK(cudaFree(device));
  Dl_info where{};
  void* lookup = dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2");
  const bool hooks = lookup && dladdr(lookup, &where) && std::strstr(where.dli_fname, "libtrainshim");
  std::printf("global cuGetProcAddress_v2 is trainshim's: %s\n", hooks ? "yes" : "no");
  return 0;
}
