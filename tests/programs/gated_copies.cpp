// A producer that a test can watch mid-run:
//   gated_copies N GATE              N copies, wait until the file GATE exists, N more copies
//   gated_copies exec M N GATE       M copies, then exec itself as `gated_copies N GATE`
// Each copy is one cudaMemcpy event. Prints "waiting" (flushed) when it reaches the gate.
#include <cuda_runtime_api.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

bool copies(int times) {
  void* device = nullptr;
  if (cudaMalloc(&device, 4096) != cudaSuccess) return false;
  char host[64] = {};
  for (int i = 0; i < times; ++i)
    if (cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return false;
  return cudaFree(device) == cudaSuccess;
}

// Bounded: a test that never opens the gate must not leave this process behind.
bool wait_for(const char* gate) {
  struct stat st {};
  for (int i = 0; i < 12000; ++i, usleep(10000))
    if (stat(gate, &st) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "exec") {
    if (!copies(std::atoi(argv[2]))) return 1;
    char* next[] = {argv[0], argv[3], argv[4], nullptr};
    execv("/proc/self/exe", next);
    std::perror("execv");
    return 1;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s N GATE | exec M N GATE\n", argv[0]);
    return 2;
  }
  const int n = std::atoi(argv[1]);
  if (!copies(n)) return 1;
  std::printf("waiting\n");
  std::fflush(stdout);
  if (!wait_for(argv[2])) return 3;
  return copies(n) ? 0 : 1;
}
