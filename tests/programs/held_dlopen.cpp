// Keeps the review's row "dlopen of libcudart after the shim initialised": the program links no
// CUDA library. It calls the runtime before any is loaded (the shim answers "symbol not found"),
// then loads LIBRARY with RTLD_GLOBAL or RTLD_LOCAL and calls again through the same symbols:
//   held_dlopen_prog LIBRARY global|local      prints before=<rc> copy=<rc> sync=<rc>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace {

using Sync = cudaError_t (*)(cudaStream_t);
using CopyAsync = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);

int rc_of_sync() {
  const auto sync = reinterpret_cast<Sync>(dlsym(RTLD_DEFAULT, "cudaStreamSynchronize"));
  return sync ? sync(nullptr) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const int before = rc_of_sync();
  const int scope = std::string(argv[2]) == "global" ? RTLD_GLOBAL : RTLD_LOCAL;
  if (!dlopen(argv[1], RTLD_NOW | scope)) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  static char device[64], host[64];
  const auto copy = reinterpret_cast<CopyAsync>(dlsym(RTLD_DEFAULT, "cudaMemcpyAsync"));
  const int copied = copy ? copy(device, host, sizeof host, cudaMemcpyHostToDevice, nullptr) : -1;
  std::printf("before=%d copy=%d sync=%d\n", before, copied, rc_of_sync());
  return 0;
}
