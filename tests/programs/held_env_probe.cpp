// Keeps the review's row "Collector launch: posix_spawn, no shell; LD_PRELOAD entries naming
// trainshim removed; DEBUGINFOD_URLS unset". Preloaded next to the shim: every process that loads
// it writes, into $HELD_PROBE_DIR/<pid>, its executable and LD_PRELOAD when it starts (and when
// it is a fork: the collector's first process forks the collector), and whether DEBUGINFOD_URLS
// is still set when it exits (the collector unsets it in main).
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void append(const std::string& line) {
  const char* dir = std::getenv("HELD_PROBE_DIR");
  if (!dir) return;
  const std::string path = std::string(dir) + "/" + std::to_string(getpid());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const auto written = write(fd, line.data(), line.size());
  close(fd);
}

void record_start() {
  char exe[PATH_MAX] = {};
  [[maybe_unused]] const auto n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  const char* preload = std::getenv("LD_PRELOAD");
  append(std::string("exe=") + exe + "\npreload=" + (preload ? preload : "") + "\n");
}

__attribute__((constructor)) void on_start() {
  record_start();
  pthread_atfork(nullptr, nullptr, record_start);
}

__attribute__((destructor)) void at_process_exit() {
  append(std::string("debuginfod_at_exit=") + (std::getenv("DEBUGINFOD_URLS") ? "set" : "unset") + "\n");
}

}  // namespace
