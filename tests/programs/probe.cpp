// Small scenarios the integration tests run under the shim, one per mode:
//   inert    makes no CUDA call; prints its thread count and whether its segment exists
//   fork     copies, forks a child that allocates pinned memory and one that calls nothing
//   killed   makes 50 recorded calls, then dies by SIGKILL before anything is drained
//   mode     makes one call, then prints its segment's permission bits
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "trainshim/names.hpp"

namespace {

std::string own_segment_path() {
  const char* job = std::getenv("TRAINSHIM_JOB");
  return std::string(trainshim::kShmDir) + "/" +
         trainshim::segment_name(getuid(), trainshim::sanitize_job(job ? job : ""), getpid());
}

int thread_count() {
  int n = 0;
  DIR* dir = opendir("/proc/self/task");
  while (dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

int copy_to_device(int times) {
  void* device = nullptr;
  if (cudaMalloc(&device, 4096) != cudaSuccess) return 1;
  char host[100] = {};
  for (int i = 0; i < times; ++i)
    if (cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return 1;
  return cudaFree(device) == cudaSuccess ? 0 : 1;
}

int fork_scenario() {
  if (copy_to_device(3) != 0) return 1;
  const pid_t allocating = fork();
  if (allocating == 0) {
    void* pinned = nullptr;
    if (cudaMallocHost(&pinned, 1 << 12) != cudaSuccess || cudaFreeHost(pinned) != cudaSuccess) _exit(1);
    _exit(0);
  }
  const pid_t quiet = fork();
  if (quiet == 0) _exit(0);
  int status_a = 0, status_q = 0;
  waitpid(allocating, &status_a, 0);
  waitpid(quiet, &status_q, 0);
  std::printf("allocating=%d quiet=%d\n", allocating, quiet);
  if (copy_to_device(1) != 0) return 1;
  return WIFEXITED(status_a) && WEXITSTATUS(status_a) == 0 && WIFEXITED(status_q) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "inert") {
    struct stat st {};
    std::printf("threads=%d segment=%s\n", thread_count(), stat(own_segment_path().c_str(), &st) == 0 ? "yes" : "no");
    return 0;
  }
  if (mode == "fork") return fork_scenario();
  if (mode == "killed") {
    if (copy_to_device(50) != 0) return 1;
    std::fflush(stdout);
    raise(SIGKILL);
  }
  if (mode == "mode") {
    if (copy_to_device(1) != 0) return 1;
    struct stat st {};
    if (stat(own_segment_path().c_str(), &st) != 0) return 1;
    std::printf("mode=%o\n", unsigned(st.st_mode & 0777));
    return 0;
  }
  std::fprintf(stderr, "usage: %s inert|fork|killed|mode\n", argv[0]);
  return 2;
}
