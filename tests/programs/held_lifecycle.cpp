// Keeps the review's row "CUDA calls from a library constructor, atexit, pthread TLS destructors,
// after pthread_exit(main)". Calls, in order of time:
//   constructor of libheld_lifecycle_lib   1 copy + 1 sync
//   main                                   1 copy
//   a thread                               1 copy, then its TLS destructor 1 copy + 1 sync
//   main's TLS destructor, after pthread_exit(main)    1 copy + 1 sync
//   atexit handler, when the last thread is gone       1 copy + 1 sync
// 6 copies and 4 syncs in all; the results of all but main's go to standard error.
#include <cuda_runtime_api.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>

namespace {

char g_device[64];
pthread_key_t g_key;

int copy() {
  char host[64] = {};
  return cudaMemcpyAsync(g_device, host, sizeof host, cudaMemcpyHostToDevice, nullptr);
}

void at_exit() {
  const int rc = copy() | cudaStreamSynchronize(nullptr);
  std::fprintf(stderr, "atexit rc=%d\n", rc);
}

void tls_destructor(void*) {
  const int rc = copy() | cudaStreamSynchronize(nullptr);
  std::fprintf(stderr, "tls destructor rc=%d\n", rc);
}

void* thread_with_tls(void*) {
  pthread_setspecific(g_key, &g_key);
  copy();
  return nullptr;
}

}  // namespace

int main() {
  if (copy() != cudaSuccess) return 1;
  std::atexit(at_exit);
  pthread_key_create(&g_key, tls_destructor);
  pthread_t thread;
  pthread_create(&thread, nullptr, thread_with_tls, nullptr);
  pthread_join(thread, nullptr);
  pthread_setspecific(g_key, &g_key);
  std::printf("main done\n");
  std::fflush(stdout);
  pthread_exit(nullptr);
}
