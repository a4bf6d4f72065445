#include "metrics_exporter.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

namespace trainshim::collector {

namespace {

// The exporter's loop looks for SIGTERM every 100 ms, but a reading of a large database in
// progress finishes first.
constexpr auto kStopGrace = std::chrono::seconds(5);

std::string exit_description(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
  return "stopped";
}

}  // namespace

std::string exporter_program() {
  std::error_code ec;
  const auto own = std::filesystem::read_symlink("/proc/self/exe", ec);
  return (ec ? std::filesystem::path(".") : own.parent_path()).append("trainshim").string();
}

MetricsExporter::MetricsExporter(const std::string& program, const std::string& database) {
  if (access(program.c_str(), X_OK) != 0)
    throw std::runtime_error(fmt::format("{}: {}", program, std::strerror(errno)));
  // Its standard output says what it does (the address it serves), its standard error what went wrong.
  int out_fds[2], err_fds[2];
  if (pipe2(out_fds, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  if (pipe2(err_fds, O_CLOEXEC) != 0) {
    close(out_fds[0]);
    close(out_fds[1]);
    throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  }
  // Everything the child needs is made before fork: between fork and exec it may only make
  // async-signal-safe calls (the collector has threads).
  std::vector<std::string> args{"trainshim", "metrics", database, "--remove-on-exit"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t collector = getpid();
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != collector) _exit(0);  // the collector died before the line above
    // The collector's signal mask and dispositions (SIGHUP, SIGPIPE ignored) are not the exporter's.
    struct sigaction defaults {};
    defaults.sa_handler = SIG_DFL;
    sigemptyset(&defaults.sa_mask);
    sigaction(SIGHUP, &defaults, nullptr);
    sigaction(SIGPIPE, &defaults, nullptr);
    sigprocmask(SIG_SETMASK, &defaults.sa_mask, nullptr);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out_fds[1], STDOUT_FILENO);
    dup2(err_fds[1], STDERR_FILENO);
    // The job's lock and the database stay the collector's alone.
    close_range(3, ~0U, 0);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  const int fork_errno = errno;
  if (null >= 0) close(null);
  close(out_fds[1]);
  close(err_fds[1]);
  if (pid_ < 0) {
    close(out_fds[0]);
    close(err_fds[0]);
    throw std::runtime_error(fmt::format("fork: {}", std::strerror(fork_errno)));
  }
  output_.fd = out_fds[0];
  errors_.fd = err_fds[0];
  for (const int fd : {output_.fd, errors_.fd}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

MetricsExporter::~MetricsExporter() {
  if (!exited_ && pid_ > 0) {
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  for (const int fd : {output_.fd, errors_.fd})
    if (fd >= 0) close(fd);
}

void MetricsExporter::Stream::take_lines(std::vector<std::string>& lines, bool all) {
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) partial.append(buffer, std::size_t(n));
  for (std::size_t end; (end = partial.find('\n')) != std::string::npos; partial.erase(0, end + 1))
    lines.push_back(partial.substr(0, end));
  if (all && !partial.empty()) lines.push_back(std::exchange(partial, ""));
}

MetricsExporter::Messages MetricsExporter::take_messages() {
  // Whether it exited is asked first: all it wrote before is in the pipes then.
  int status = 0;
  const bool just_exited = !exited_ && waitpid(pid_, &status, WNOHANG) == pid_;
  Messages messages;
  output_.take_lines(messages.said, just_exited);
  errors_.take_lines(messages.errors, just_exited);
  if (just_exited) {
    exited_ = true;
    messages.exit = fmt::format("the metrics exporter {} {}: the job's metrics are no longer exported", pid_,
                                exit_description(status));
  }
  return messages;
}

}  // namespace trainshim::collector
