#pragma once
// How a job's collector is started, by the shim on demand or by `trainshim run`. The starter
// takes the job's lock (collector_lock.hpp) and hands the locked descriptor to the collector as
// fd 3, so exactly one collector runs per job per node and a dead collector releases the lock
// with its last descriptor. The collector closes every other descriptor it inherits.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "trainshim/collector_lock.hpp"

extern char** environ;

namespace trainshim {

inline constexpr int kCollectorLockFd = 3;

enum class LaunchResult { Started, AlreadyRunning, NoLockFile, Failed };

struct Launch {
  LaunchResult result = LaunchResult::Failed;
  pid_t pid = -1;                        // the collector, when the starter is its parent
  std::vector<RefusedLockFile> refused;  // other users' lock files passed over
  std::string problem;                   // what went wrong, when NoLockFile or Failed
};

// Who the collector's parent is. Detached: none that the job knows of. The collector's first
// process forks and exits at once (the starter reaps it), so the collector itself is adopted by
// init: a job that reaps its children until none is left never waits for the collector.
// Starter: the caller, which waits for it (trainshim run).
enum class CollectorParent { Detached, Starter };

// Without the preload entries that name trainshim: the collector must not watch itself.
inline std::vector<std::string> environment_without_preload() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    if (entry.starts_with("LD_PRELOAD=")) {
      std::string kept = "LD_PRELOAD=";
      std::string_view list = entry.substr(11);
      while (!list.empty()) {
        const auto sep = list.find_first_of(": ");
        const auto item = list.substr(0, sep);
        if (!item.empty() && item.find("trainshim") == std::string_view::npos) {
          if (kept.size() > 11) kept += ':';
          kept += item;
        }
        list = sep == std::string_view::npos ? std::string_view{} : list.substr(sep + 1);
      }
      if (kept.size() > 11) env.push_back(kept);
      continue;
    }
    env.emplace_back(entry);
  }
  return env;
}

// `args` are the collector's own options; the lock's descriptor (and --daemonize) are added here.
// Either way the collector runs in a session of its own: a terminal's Ctrl-C does not reach it.
inline Launch launch_collector(const std::string& collector_path, uid_t uid, std::string_view job,
                               const std::vector<std::string>& args, CollectorParent parent) {
  Launch launch;
  CollectorLock lock = acquire_collector_lock(uid, job);
  launch.refused = lock.refused;
  switch (lock.outcome) {
    case CollectorLock::Outcome::Acquired:
      break;
    case CollectorLock::Outcome::Held:
      launch.result = LaunchResult::AlreadyRunning;
      return launch;
    case CollectorLock::Outcome::NoUsableFile:
      launch.result = LaunchResult::NoLockFile;
      launch.problem = no_usable_lock_message(job);
      return launch;
    case CollectorLock::Outcome::Failed:
      launch.problem = lock.error;
      return launch;
  }
  // A dup2 onto itself keeps close-on-exec on older C libraries: the collector would lose it.
  if (lock.fd == kCollectorLockFd) {
    const int moved = fcntl(lock.fd, F_DUPFD_CLOEXEC, kCollectorLockFd + 1);
    close(lock.fd);
    lock.fd = moved;
    if (moved < 0) {
      launch.problem = std::string("cannot move the lock descriptor: ") + std::strerror(errno);
      return launch;
    }
  }
  std::vector<std::string> argv_store{collector_path};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  argv_store.insert(argv_store.end(), {"--lock-fd", std::to_string(kCollectorLockFd)});
  if (parent == CollectorParent::Detached) argv_store.emplace_back("--daemonize");
  std::vector<char*> argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto env_store = environment_without_preload();
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, lock.fd, kCollectorLockFd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Termination stays blocked until the collector has installed its handlers (it unblocks them),
  // so a stop request that comes at once still ends in a clean flush.
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGINT);
  posix_spawnattr_setsigmask(&attr, &blocked);
  short flags = POSIX_SPAWN_SETSIGMASK;
  if (parent == CollectorParent::Starter) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, collector_path.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(lock.fd);
  if (rc != 0) {
    launch.problem = "cannot run " + collector_path + ": " + std::strerror(rc);
    return launch;
  }
  if (parent == CollectorParent::Detached) {
    // The first process only forks: it is gone within the collector's start-up. The job may
    // reap it first (a wait() loop, SIGCHLD ignored): that is ECHILD here, and fine.
    int status = 0;
    pid_t reaped;
    while ((reaped = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (reaped == pid && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      launch.problem = collector_path + " failed as it started (" +
                       (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                          : "signal " + std::to_string(WTERMSIG(status))) +
                       ")";
      return launch;
    }
  } else {
    launch.pid = pid;
  }
  launch.result = LaunchResult::Started;
  return launch;
}

}  // namespace trainshim
