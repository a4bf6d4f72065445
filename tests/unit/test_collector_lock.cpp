// The job's collector lock (common/trainshim/collector_lock.hpp): which name is taken, which is
// refused, and that two names never give two collectors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "trainshim/collector_lock.hpp"

namespace trainshim {
namespace {

struct LockJob {
  LockJob() : job("unit_lock_" + std::to_string(getpid()) + "_" + std::to_string(counter++)) {}
  ~LockJob() {
    for (int candidate = 0; candidate < kLockCandidates; ++candidate)
      unlink(collector_lock_path(getuid(), job, candidate).c_str());
  }
  std::string path(int candidate) const { return collector_lock_path(getuid(), job, candidate); }
  static inline int counter = 0;
  std::string job;
};

TEST(CollectorLock, CandidateNames) {
  EXPECT_EQ(collector_lock_path(1000, "run7", 0), "/dev/shm/trainshim-1000-run7.lock");
  EXPECT_EQ(collector_lock_path(1000, "run7", 15), "/dev/shm/trainshim-1000-run7.lock.15");
}

TEST(CollectorLock, FirstTakerHoldsItAndTheNextSeesItHeld) {
  LockJob j;
  CollectorLock first = acquire_collector_lock(getuid(), j.job);
  ASSERT_EQ(first.outcome, CollectorLock::Outcome::Acquired);
  EXPECT_EQ(first.path, j.path(0));
  EXPECT_TRUE(first.refused.empty());
  struct stat st {};
  ASSERT_EQ(stat(first.path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(held_lock_path(first.fd, getuid(), j.job), j.path(0));
  EXPECT_TRUE(collector_running(getuid(), j.job));
  EXPECT_EQ(acquire_collector_lock(getuid(), j.job).outcome, CollectorLock::Outcome::Held);
  close(first.fd);
  EXPECT_FALSE(collector_running(getuid(), j.job));
}

TEST(CollectorLock, OwnFileOpenToOthersIsRefusedAndTheNextNameTaken) {
  LockJob j;
  const int planted = open(j.path(0).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(planted, 0);
  ASSERT_EQ(fchmod(planted, 0666), 0);
  close(planted);
  CollectorLock lock = acquire_collector_lock(getuid(), j.job);
  ASSERT_EQ(lock.outcome, CollectorLock::Outcome::Acquired);
  EXPECT_EQ(lock.path, j.path(1));
  ASSERT_EQ(lock.refused.size(), 1u);
  EXPECT_EQ(lock.refused[0].path, j.path(0));
  EXPECT_EQ(lock.refused[0].reason, "mode 0666 lets other users open it");
  const auto passed_over = lock_files_passed_over(getuid(), j.job, lock.path);
  ASSERT_EQ(passed_over.size(), 1u);
  EXPECT_EQ(passed_over[0].reason, "mode 0666 lets other users open it");
  close(lock.fd);
}

// A collector took the second name while the first was someone else's; once the first is free
// again, a new process must still see that collector instead of starting a second one.
TEST(CollectorLock, CollectorHoldingALaterNameIsSeen) {
  LockJob j;
  const int later = open(j.path(3).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  ASSERT_GE(later, 0);
  ASSERT_EQ(flock(later, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(acquire_collector_lock(getuid(), j.job).outcome, CollectorLock::Outcome::Held);
  close(later);
  CollectorLock lock = acquire_collector_lock(getuid(), j.job);
  EXPECT_EQ(lock.outcome, CollectorLock::Outcome::Acquired);
  EXPECT_EQ(lock.path, j.path(0));
  close(lock.fd);
}

TEST(CollectorLock, LockOnARemovedFileIsNotTheLock) {
  LockJob j;
  CollectorLock lock = acquire_collector_lock(getuid(), j.job);
  ASSERT_EQ(lock.outcome, CollectorLock::Outcome::Acquired);
  unlink(lock.path.c_str());
  EXPECT_EQ(held_lock_path(lock.fd, getuid(), j.job), "");
  CollectorLock next = acquire_collector_lock(getuid(), j.job);
  EXPECT_EQ(next.outcome, CollectorLock::Outcome::Acquired) << "a lock on a removed file guards nothing";
  close(lock.fd);
  close(next.fd);
}

TEST(CollectorLock, SymbolicLinkIsRefusedWithoutCreatingItsTarget) {
  LockJob j;
  const std::string target = "/dev/shm/unit_lock_target_" + std::to_string(getpid());
  ASSERT_EQ(symlink(target.c_str(), j.path(0).c_str()), 0);
  CollectorLock lock = acquire_collector_lock(getuid(), j.job);
  ASSERT_EQ(lock.outcome, CollectorLock::Outcome::Acquired);
  EXPECT_EQ(lock.path, j.path(1));
  ASSERT_EQ(lock.refused.size(), 1u);
  EXPECT_EQ(lock.refused[0].reason, "a symbolic link");
  EXPECT_NE(access(target.c_str(), F_OK), 0);
  close(lock.fd);
}

}  // namespace
}  // namespace trainshim
