// Keeps the review's row "CUDA calls from a library constructor, atexit, pthread TLS destructors,
// after pthread_exit(main)": this library's constructor makes a copy and a sync before main runs.
#include <cuda_runtime_api.h>

#include <cstdio>

namespace {

char g_device[64];

__attribute__((constructor)) void on_load() {
  char host[64] = {};
  const int rc =
      cudaMemcpyAsync(g_device, host, sizeof host, cudaMemcpyHostToDevice, nullptr) | cudaStreamSynchronize(nullptr);
  std::fprintf(stderr, "constructor rc=%d\n", rc);
}

}  // namespace
