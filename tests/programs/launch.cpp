// How the collector is started, seen from the job (reliability review, sections named per mode):
//   copies N          N pageable copies, then prints "copies=N" (section 3: output captured by $(...))
//   reap              a launcher that uses CUDA, starts two workers, then reaps children until
//                     ECHILD (section 2: the collector must not be one of its children)
//   chdir DIR N       changes to DIR before its first CUDA call, then N copies (section 12)
//   interrupt N M     ignores SIGINT, makes N copies, sends SIGINT to its whole process group (as
//                     a terminal's Ctrl-C does), then M more copies (section 14)
//   recheck N         holds the job's collector lock, as a collector that is exiting still does,
//                     while its first CUDA call starts recording; releases it as that collector
//                     would, copies until a collector holds the lock again, then N more copies;
//                     prints "copies=<all copies>" (section 17)
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "trainshim/collector_lock.hpp"
#include "trainshim/names.hpp"

namespace {

void* g_device = nullptr;

bool copy_to_device(int times) {
  if (!g_device && cudaMalloc(&g_device, 4096) != cudaSuccess) return false;
  char host[100] = {};
  for (int i = 0; i < times; ++i)
    if (cudaMemcpy(g_device, host, sizeof host, cudaMemcpyHostToDevice) != cudaSuccess) return false;
  return true;
}

int reap() {
  if (!copy_to_device(1)) return 1;
  for (int i = 0; i < 2; ++i)
    if (fork() == 0) _exit(0);
  while (wait(nullptr) > 0) {
  }
  if (errno != ECHILD) return 1;
  std::printf("reaped until ECHILD\n");
  return 0;
}

std::string job_from_environment() {
  const char* job = std::getenv("TRAINSHIM_JOB");
  return trainshim::sanitize_job(job ? job : "");
}

int interrupt(int before, int after) {
  signal(SIGINT, SIG_IGN);
  if (!copy_to_device(before)) return 1;
  kill(0, SIGINT);
  // A collector that takes the interrupt is gone within this second; the copies after it would
  // then go undrained. (One that does not take it runs on, and this is just a pause.)
  for (int wait = 0; wait < 100 && trainshim::collector_running(getuid(), job_from_environment()); ++wait)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!copy_to_device(after)) return 1;
  std::printf("copies=%d\n", before + after);
  return 0;
}

int recheck(int after) {
  const std::string job = job_from_environment();
  const trainshim::CollectorLock lock = trainshim::acquire_collector_lock(getuid(), job);
  if (lock.outcome != trainshim::CollectorLock::Outcome::Acquired) {
    std::printf("the lock of job %s is not free\n", job.c_str());
    return 3;
  }
  if (!copy_to_device(1)) return 1;
  // What an exiting collector does last (collector/main.cpp).
  unlink(lock.path.c_str());
  close(lock.fd);
  int copies = 1;
  // Bounded: a shim that never checks again leaves this loop after 30 s.
  for (int wait = 0; wait < 3000 && !trainshim::collector_running(getuid(), job); ++wait, ++copies) {
    if (!copy_to_device(1)) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!trainshim::collector_running(getuid(), job)) {
    std::printf("no collector after %d copies\n", copies);
    return 2;
  }
  if (!copy_to_device(after)) return 1;
  std::printf("copies=%d\n", copies + after);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int n = argc > 2 ? std::atoi(argv[2]) : 0;
  if (mode == "copies") {
    if (!copy_to_device(n)) return 1;
    std::printf("copies=%d\n", n);
    return 0;
  }
  if (mode == "reap") return reap();
  if (mode == "chdir") {
    if (argc < 4 || chdir(argv[2]) != 0) return 1;
    return copy_to_device(std::atoi(argv[3])) ? 0 : 1;
  }
  if (mode == "interrupt" && argc > 3) return interrupt(n, std::atoi(argv[3]));
  if (mode == "recheck") return recheck(n);
  std::fprintf(stderr, "usage: launch_prog copies N | reap | chdir DIR N | interrupt N M | recheck N\n");
  return 2;
}
