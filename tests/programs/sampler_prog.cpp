// A C++ program (no Python) for the sampler's tests (tests/integration/test_sampler.cpp):
//   sampler_prog sleep MS       one recorded call, then the main thread sleeps MS ms in clock_nanosleep
//   sampler_prog no_cuda MS     no CUDA call: sleeps MS ms, then prints "threads N" (its /proc/self/task)
//   sampler_prog facts MS       pinned to CPU 0 (sched_setaffinity), cudaSetDevice(1), one recorded call,
//                               sleeps MS ms
//   sampler_prog census MS      forks two children named as PyTorch names its DataLoader workers (prctl: the
//                               releases' pt_data_worker, the newer name cut to pt_multiprocess) that burn CPU then
//                               sleep, and one other child; then one recorded call, sleeps MS ms, prints "threads N"
//                               and "workers_cpu_ns N" (what /proc says of them now), kills the children
//   sampler_prog fork MS        cudaSetDevice(1) (SIMCUDA_DEVICES=2 or more), one recorded call, then forks a
//                               child that makes one recorded call (its own recording, device 0) and sleeps
//                               MS ms; prints "child PID"; the parent sleeps MS ms and waits for it
//   sampler_prog main_exits MS  one recorded call, then 4 threads that make one recorded call each, print
//                               "worker TID" and sleep; the main thread pthread_exit()s at once; the first
//                               worker exit()s the process MS ms later (the runtime's own threads would
//                               keep a process whose last worker returned alive, as the real runtime's do)
//   sampler_prog rotation MS    one recorded call, then 8 threads that make one recorded call each, print
//                               "polling TID" and wake every ms, and 4 that print "blocked TID" and sleep,
//                               named "poller" and "sleeper"; the main thread renames itself "rotation_main",
//                               sleeps MS ms and exit()s the process
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "check.hpp"

namespace {

void sleep_ms(long ms) {
  timespec pause{ms / 1000, (ms % 1000) * 1'000'000L};
  // The raw system call: the test expects the samples to name exactly this one (SYS_clock_nanosleep).
  while (syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &pause, &pause) != 0) {
  }
}

int threads() {
  int count = 0;
  DIR* tasks = opendir("/proc/self/task");
  while (const dirent* entry = tasks ? readdir(tasks) : nullptr)
    if (entry->d_name[0] != '.') ++count;
  if (tasks) closedir(tasks);
  return count;
}

uint64_t cpu_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream fields(text.substr(text.rfind(')') + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) utime = std::stoull(field);
    if (index == 15) stime = std::stoull(field);
  }
  return (utime + stime) * (1'000'000'000ULL / uint64_t(sysconf(_SC_CLK_TCK)));
}

// A child that names itself (or not), burns `cpu_ms` of CPU, says so on `ready`, then sleeps.
pid_t child(const char* name, long cpu_ms, int ready) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  if (name) prctl(PR_SET_NAME, name);
  timespec used{};
  do clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &used);
  while (used.tv_sec * 1000 + used.tv_nsec / 1'000'000 < cpu_ms);
  const char byte = 1;
  if (write(ready, &byte, 1) != 1) _exit(1);
  for (;;) pause();
}

void recorded_call() { CHECK(cudaDeviceSynchronize()); }

long g_worker_ms = 0;

void* worker_of_exited_main(void* first) {
  recorded_call();
  static pthread_mutex_t print = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&print);
  std::printf("worker %ld\n", long(syscall(SYS_gettid)));
  std::fflush(stdout);
  pthread_mutex_unlock(&print);
  sleep_ms(first ? g_worker_ms : 100 * g_worker_ms);
  std::exit(0);
}

void* polling(void*) {
  pthread_setname_np(pthread_self(), "poller");
  recorded_call();
  std::printf("polling %ld\n", long(syscall(SYS_gettid)));
  for (;;) sleep_ms(1);
}

void* blocked(void*) {
  pthread_setname_np(pthread_self(), "sleeper");
  recorded_call();
  std::printf("blocked %ld\n", long(syscall(SYS_gettid)));
  for (;;) sleep_ms(60'000);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const std::string mode = argv[1];
  const long ms = std::atol(argv[2]);
  if (mode == "sleep") {
    recorded_call();
    sleep_ms(ms);
  } else if (mode == "no_cuda") {
    sleep_ms(ms);
    std::printf("threads %d\n", threads());
  } else if (mode == "facts") {
    cpu_set_t only_first;
    CPU_ZERO(&only_first);
    CPU_SET(0, &only_first);
    if (sched_setaffinity(0, sizeof only_first, &only_first) != 0) return 3;
    CHECK(cudaSetDevice(1));
    recorded_call();
    sleep_ms(ms);
  } else if (mode == "census") {
    int ready[2];
    if (pipe(ready) != 0) return 3;
    const pid_t children[] = {child("pt_data_worker", 30, ready[1]), child("pt_multiprocess", 30, ready[1]),
                              child(nullptr, 0, ready[1])};
    for (int i = 0; i < 3; ++i) {
      char byte;
      if (read(ready[0], &byte, 1) != 1) return 4;
    }
    recorded_call();
    sleep_ms(ms);
    std::printf("threads %d\n", threads());
    std::printf("workers_cpu_ns %llu\n", (unsigned long long)(cpu_ns(children[0]) + cpu_ns(children[1])));
    for (const pid_t pid : children) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } else if (mode == "short_workers") {
    // Two named workers forked after the first call, gone 400 ms later: within one census period.
    recorded_call();
    sleep_ms(100);
    int ready[2];
    if (pipe(ready) != 0) return 3;
    const pid_t children[] = {child("pt_data_worker", 0, ready[1]), child("pt_data_worker", 0, ready[1])};
    sleep_ms(400);
    for (const pid_t pid : children) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    sleep_ms(ms);
  } else if (mode == "fork") {
    CHECK(cudaSetDevice(1));
    recorded_call();
    const pid_t pid = fork();
    if (pid == 0) {
      recorded_call();
      sleep_ms(ms);
      return 0;
    }
    std::printf("child %d\n", pid);
    sleep_ms(ms);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 5;
  } else if (mode == "main_exits") {
    recorded_call();
    g_worker_ms = ms;
    for (int i = 0; i < 4; ++i) {
      pthread_t worker;
      if (pthread_create(&worker, nullptr, worker_of_exited_main, i == 0 ? &g_worker_ms : nullptr) != 0) return 3;
    }
    pthread_exit(nullptr);
  } else if (mode == "rotation") {
    recorded_call();
    setvbuf(stdout, nullptr, _IOLBF, 0);
    for (int i = 0; i < 12; ++i) {
      pthread_t thread;
      if (pthread_create(&thread, nullptr, i < 8 ? polling : blocked, nullptr) != 0) return 3;
    }
    pthread_setname_np(pthread_self(), "rotation_main");
    sleep_ms(ms);
    std::exit(0);
  } else {
    return 2;
  }
  return 0;
}
