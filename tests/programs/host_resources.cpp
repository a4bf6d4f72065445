// host_resources shm MB: makes CUDA calls, then shares one MB-MiB batch through /dev/shm the way
// PyTorch's DataLoader workers do (shm_open, ftruncate, mmap, a write to every page: SIGBUS when
// /dev/shm has no page left); prints "shared MB MiB".
// host_resources files THREADS LIMIT: RLIMIT_NOFILE set to LIMIT, THREADS threads each make a CUDA
// call and stay while the sampler ticks; then the program opens files until EMFILE and prints
// "opened N".
// host_resources proc_files THREADS: THREADS threads each make a CUDA call and poll; the main thread
// lists its descriptors for a second and prints "most N": the most of them open on /proc files at
// once (the sampler's; the program opens none).
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"

namespace {

int share_batch(size_t mib) {
  void* device = nullptr;
  char host[64] = {};
  CHECK(cudaMalloc(&device, sizeof host));
  CHECK(cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice));
  const size_t bytes = mib << 20;
  const std::string name = "/host_resources_" + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, off_t(bytes)) != 0) {
    std::perror("shm");
    return 1;
  }
  void* batch = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  shm_unlink(name.c_str());
  if (batch == MAP_FAILED) return 1;
  std::memset(batch, 1, bytes);
  std::printf("shared %zu MiB\n", mib);
  return 0;
}

// After a CUDA call of the main thread, `threads` threads that each make one and then wake every
// ms until the object is destroyed: threads the sampler samples, which have always run since.
class PollingCallers {
 public:
  explicit PollingCallers(int threads) {
    void* device = nullptr;
    CHECK(cudaMalloc(&device, 64));
    for (int i = 0; i < threads; ++i)
      callers_.emplace_back([this] {
        CHECK(cudaDeviceSynchronize());
        while (!stop_) usleep(1000);
      });
  }
  ~PollingCallers() {
    stop_ = true;
    for (std::thread& t : callers_) t.join();
  }
  PollingCallers(const PollingCallers&) = delete;
  PollingCallers& operator=(const PollingCallers&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> callers_;
};

int open_until_refused(int threads, rlim_t limit) {
  const rlimit nofile{limit, limit};
  if (setrlimit(RLIMIT_NOFILE, &nofile) != 0) return 1;
  int opened = 0;
  {
    const PollingCallers callers(threads);
    usleep(500'000);  // sampler ticks over every thread
    // Refused 25 times 20 ms apart: what the program can hold, not a descriptor the sampler opened for
    // a moment of its tick, nor one it held until its own open was refused.
    for (int refused = 0; refused < 25;) {
      if (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {
        ++opened;
        refused = 0;
      } else {
        ++refused;
        usleep(20'000);
      }
    }
  }
  std::printf("opened %d\n", opened);
  return 0;
}

// How many of the process's descriptors are open on a file under /proc.
int proc_files() {
  DIR* fds = opendir("/proc/self/fd");
  if (!fds) return -1;
  int count = 0;
  while (const dirent* entry = readdir(fds)) {
    char link[300], target[256];
    std::snprintf(link, sizeof link, "/proc/self/fd/%s", entry->d_name);
    const ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    // The listing's own descriptor is /proc/<pid>/fd.
    if (std::strncmp(target, "/proc/", 6) == 0 && !std::strstr(target, "/fd")) ++count;
  }
  closedir(fds);
  return count;
}

int most_proc_files(int threads) {
  const PollingCallers callers(threads);
  int most = 0;
  timespec start{}, now{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    most = std::max(most, proc_files());
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while (now.tv_sec - start.tv_sec < 1 || (now.tv_sec - start.tv_sec == 1 && now.tv_nsec < start.tv_nsec));
  std::printf("most %d\n", most);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "shm" && argc == 3) return share_batch(std::strtoul(argv[2], nullptr, 10));
  if (mode == "files" && argc == 4) return open_until_refused(std::atoi(argv[2]), std::strtoul(argv[3], nullptr, 10));
  if (mode == "proc_files" && argc == 3) return most_proc_files(std::atoi(argv[2]));
  std::fprintf(stderr, "usage: host_resources shm MB | files THREADS LIMIT | proc_files THREADS\n");
  return 2;
}
