// own_descriptors MODE: a program that closes every descriptor it did not open (close_range, as
// daemons and sandboxes do) once CUDA has started, then opens 16 files of its own, which get the
// freed numbers. It writes to each and prints "N of 16 closed", exit 1 when N > 0.
//   thread_exit  a thread that made a CUDA call (the sampler keeps descriptors for it) exits first
//   fork         a forked child writes to the 16 files it inherited (the shim's fork handlers run)
// own_descriptors copies N: 100 cudaMemcpy 1 ms apart, close_range, N more; prints "done".
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

namespace {

constexpr int kFiles = 16;

int closed_of(const int (&fds)[kFiles]) {
  int closed = 0;
  for (const int fd : fds)
    if (write(fd, "x", 1) != 1) ++closed;
  return closed;
}

}  // namespace

int copies_around_close(int after) {
  void* device = nullptr;
  char host[64] = {};
  if (cudaMalloc(&device, sizeof host) != cudaSuccess) return 2;
  for (int i = 0; i < 100 + after; ++i) {
    if (i == 100) syscall(SYS_close_range, 3U, ~0U, 0U);
    if (cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return 2;
    usleep(1000);
  }
  std::printf("done\n");
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "thread_exit";
  if (mode == "copies") return copies_around_close(argc > 2 ? std::atoi(argv[2]) : 1000);
  void* device = nullptr;
  if (cudaMalloc(&device, 64) != cudaSuccess) return 2;
  std::atomic<bool> stop{false};
  std::thread sampled([&] {
    char host[64] = {};
    cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice);
    while (!stop) usleep(1000);
  });
  usleep(300'000);  // sampler ticks: the thread's files are open
  syscall(SYS_close_range, 3U, ~0U, 0U);
  int fds[kFiles];
  for (int i = 0; i < kFiles; ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "/tmp/own_descriptors.%d.%d", int(getpid()), i);
    fds[i] = open(name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    unlink(name);
  }
  stop = true;
  sampled.join();
  int closed = 0;
  if (mode == "fork") {
    const pid_t child = fork();
    if (child == 0) _exit(closed_of(fds));
    int status = 0;
    waitpid(child, &status, 0);
    closed = WIFEXITED(status) ? WEXITSTATUS(status) : kFiles;
  } else {
    usleep(300'000);  // sampler ticks after the thread's exit
    closed = closed_of(fds);
  }
  std::printf("%d of %d closed\n", closed, kFiles);
  return closed ? 1 : 0;
}
