#pragma once
// How a job's collector is started, by the shim on demand or by `trainshim run`. The starter
// takes the job's lock file with a non-blocking flock and hands the locked descriptor to the
// collector as fd 3, so exactly one collector runs per job per node and a dead collector
// releases the lock with its last descriptor.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <unistd.h>

#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace trainshim {

inline constexpr int kCollectorLockFd = 3;

enum class LaunchResult { Started, AlreadyRunning, Failed };

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

// `args` are the collector's own options; the lock's descriptor is added here.
// detach: start it in its own session, so the job's signals and exit do not reach it.
inline LaunchResult launch_collector(const std::string& collector_path, const std::string& lock_path,
                                     const std::vector<std::string>& args, bool detach, pid_t* pid_out) {
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) return LaunchResult::Failed;
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    close(lock_fd);
    return LaunchResult::AlreadyRunning;
  }
  std::vector<std::string> argv_store{collector_path};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  argv_store.insert(argv_store.end(), {"--lock-fd", std::to_string(kCollectorLockFd)});
  std::vector<char*> argv;
  for (auto& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto env_store = environment_without_preload();
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, lock_fd, kCollectorLockFd);
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
  if (detach) flags |= POSIX_SPAWN_SETSID;
  posix_spawnattr_setflags(&attr, flags);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, collector_path.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(lock_fd);
  if (rc != 0) return LaunchResult::Failed;
  if (pid_out) *pid_out = pid;
  return LaunchResult::Started;
}

}  // namespace trainshim
