#pragma once
// The job's collector lock, taken the same way by the shim, `trainshim run` and the collector.
// Its files live in /dev/shm, where any user may create a name first: a name that is not ours
// (another owner, a symbolic link, a mode open to other users) is refused and the next candidate
// is tried, in the same order in every process of the job, so that they all agree on one lock.
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "trainshim/names.hpp"

namespace trainshim {

struct RefusedLockFile {
  std::string path;
  std::string reason;
};

struct CollectorLock {
  enum class Outcome { Acquired, Held, NoUsableFile, Failed };
  Outcome outcome = Outcome::Failed;
  int fd = -1;                           // the held lock (close-on-exec), when Acquired
  std::string path;                      // its name, when Acquired
  std::vector<RefusedLockFile> refused;  // other users' names passed over on the way
  std::string error;                     // what failed, when Failed
};

namespace lock_detail {

// Why a file with this status is not a lock file of `uid`'s; empty when it is one.
inline std::string foreign_reason(const struct stat& st, uid_t uid) {
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != uid) return "owned by uid " + std::to_string(st.st_uid);
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    return std::string("mode ") + mode + " lets other users open it";
  }
  return {};
}

// The candidate opened for locking, or -1: with `refusal` set when the name is not ours, else
// with errno set (a failure that another name would not cure, or no such file when !create).
inline int open_own(const std::string& path, uid_t uid, bool create, std::string& refusal) {
  refusal.clear();
  const int fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (create ? O_CREAT : 0), 0600);
  if (fd < 0) {
    const int error = errno;
    struct stat st {};
    if (error == ELOOP) refusal = "a symbolic link";
    else if ((error == EACCES || error == EPERM || error == EISDIR || error == ENXIO) && lstat(path.c_str(), &st) == 0)
      refusal = foreign_reason(st, uid);
    if ((error == EACCES || error == EPERM) && refusal.empty()) refusal = std::strerror(error);
    errno = error;
    return -1;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  refusal = foreign_reason(st, uid);
  if (!refusal.empty()) {
    close(fd);
    return -1;
  }
  return fd;
}

inline bool names_file(const std::string& path, int fd) {
  struct stat held {
  }, named{};
  return fstat(fd, &held) == 0 && lstat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

// Whether someone holds the candidate now. Never creates it; the probe's own lock ends with close.
inline bool held_by_someone(const std::string& path, uid_t uid) {
  std::string refusal;
  const int fd = open_own(path, uid, false, refusal);
  if (fd < 0) return false;
  const bool held = flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return held;
}

}  // namespace lock_detail

// Takes the job's lock without waiting. Held: a collector runs (the normal case for every
// process of a job but the first).
inline CollectorLock acquire_collector_lock(uid_t uid, std::string_view job) {
  CollectorLock lock;
  for (int candidate = 0; candidate < kLockCandidates; ++candidate) {
    const std::string path = collector_lock_path(uid, job, candidate);
    std::string refusal;
    int fd = -1;
    int open_error = 0;
    // A collector removes its lock file as it exits: a lock on a name removed meanwhile guards
    // nothing, so the name is opened again (a few times: each removal is a collector's exit).
    for (int attempt = 0; attempt < 4 && fd < 0; ++attempt) {
      fd = lock_detail::open_own(path, uid, true, refusal);
      if (fd < 0) {
        open_error = errno;
        break;
      }
      if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int error = errno;
        close(fd);
        if (error == EWOULDBLOCK) {
          lock.outcome = CollectorLock::Outcome::Held;
          return lock;
        }
        lock.error = "cannot lock " + path + ": " + std::strerror(error);
        return lock;
      }
      if (!lock_detail::names_file(path, fd)) {
        close(fd);
        fd = -1;
      }
    }
    if (fd < 0 && !refusal.empty()) {
      lock.refused.push_back({path, refusal});
      continue;
    }
    if (fd < 0 && open_error) {
      lock.error = "cannot open " + path + ": " + std::strerror(open_error);
      return lock;
    }
    if (fd < 0) {
      lock.outcome = CollectorLock::Outcome::Held;
      return lock;
    }
    // A collector that took another name (this one was someone else's then) drains the job.
    for (int other = 0; other < kLockCandidates; ++other) {
      if (other != candidate && lock_detail::held_by_someone(collector_lock_path(uid, job, other), uid)) {
        close(fd);
        lock.outcome = CollectorLock::Outcome::Held;
        return lock;
      }
    }
    lock.outcome = CollectorLock::Outcome::Acquired;
    lock.fd = fd;
    lock.path = path;
    return lock;
  }
  lock.outcome = CollectorLock::Outcome::NoUsableFile;
  return lock;
}

// Removes the lock file a collector killed before its exit left (it removes its own as it exits),
// as a collector's exit does: unlinked while held. Left as it is while a collector holds it.
inline void remove_abandoned_collector_lock(uid_t uid, std::string_view job) {
  const CollectorLock lock = acquire_collector_lock(uid, job);
  if (lock.outcome != CollectorLock::Outcome::Acquired) return;
  unlink(lock.path.c_str());
  close(lock.fd);
}

// Whether a collector of the job runs now (it holds one of the job's lock names).
inline bool collector_running(uid_t uid, std::string_view job) {
  for (int candidate = 0; candidate < kLockCandidates; ++candidate)
    if (lock_detail::held_by_someone(collector_lock_path(uid, job, candidate), uid)) return true;
  return false;
}

// The candidate name under which `fd` is the lock file now; empty when it is none (its file
// was removed or replaced, so holding it guards nothing).
inline std::string held_lock_path(int fd, uid_t uid, std::string_view job) {
  for (int candidate = 0; candidate < kLockCandidates; ++candidate) {
    const std::string path = collector_lock_path(uid, job, candidate);
    if (lock_detail::names_file(path, fd)) return path;
  }
  return {};
}

// The names before `path` that were passed over, and why (as they are now).
inline std::vector<RefusedLockFile> lock_files_passed_over(uid_t uid, std::string_view job, const std::string& path) {
  std::vector<RefusedLockFile> refused;
  for (int candidate = 0; candidate < kLockCandidates; ++candidate) {
    const std::string earlier = collector_lock_path(uid, job, candidate);
    if (earlier == path) break;
    struct stat st {};
    if (lstat(earlier.c_str(), &st) == 0) refused.push_back({earlier, lock_detail::foreign_reason(st, uid)});
  }
  return refused;
}

// One line naming each refused file, for the user; empty when none was refused.
inline std::string describe_refused(const std::vector<RefusedLockFile>& refused) {
  if (refused.empty()) return {};
  std::string text = "refused the lock file";
  if (refused.size() > 1) text += "s";
  for (std::size_t i = 0; i < refused.size(); ++i)
    text += (i ? ", " : " ") + refused[i].path + " (" + refused[i].reason + ")";
  return text + ": another user created it, only your own 0600 file is used";
}

// The held lock file holds the database its collector writes (an absolute path), so that a
// command given only the job finds a database named with --out or TRAINSHIM_OUT elsewhere.
inline bool write_lock_database(int fd, const std::string& database) {
  if (ftruncate(fd, 0) != 0) return false;
  return pwrite(fd, database.data(), database.size(), 0) == ssize_t(database.size());
}

// The database the running collector of `job` writes, as its lock file says; empty when no
// collector of the job runs or its lock names none.
inline std::string running_collector_database(uid_t uid, std::string_view job) {
  for (int candidate = 0; candidate < kLockCandidates; ++candidate) {
    const std::string path = collector_lock_path(uid, job, candidate);
    if (!lock_detail::held_by_someone(path, uid)) continue;
    std::string refusal;
    const int fd = lock_detail::open_own(path, uid, false, refusal);
    if (fd < 0) return {};
    char text[4096];
    const ssize_t n = pread(fd, text, sizeof text, 0);
    close(fd);
    return n > 0 && text[0] == '/' ? std::string(text, std::size_t(n)) : std::string();
  }
  return {};
}

inline std::string no_usable_lock_message(std::string_view job) {
  return "all " + std::to_string(kLockCandidates) + " lock file names of job " + std::string(job) +
         " in /dev/shm belong to other users, so no collector is started; the job runs and its events wait in "
         "shared memory. Have those files removed (their owner or root), or set TRAINSHIM_JOB to another id, "
         "then drain with `trainshim collect --job " +
         std::string(job) + "`";
}

}  // namespace trainshim
