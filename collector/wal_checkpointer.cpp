#include "wal_checkpointer.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <stdexcept>

namespace trainshim::collector {

WalCheckpointer::WalCheckpointer(const std::string& path, dev_t device, ino_t inode) {
  const int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr);
  struct stat st {};
  const bool same = lstat(path.c_str(), &st) == 0 && st.st_dev == device && st.st_ino == inode;
  if (rc != SQLITE_OK || !same) {
    const std::string why = rc != SQLITE_OK ? (db_ ? sqlite3_errmsg(db_) : "out of memory") : "it was replaced";
    sqlite3_close(db_);
    throw std::runtime_error(fmt::format("cannot open the database {} a second time to checkpoint it: {} (set "
                                         "TRAINSHIM_OUT to a file in a directory only you can write)",
                                         path, why));
  }
  // What a checkpoint copies is synced first, and the database file after (the writer itself
  // syncs nothing).
  sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr);
  thread_ = std::thread([this] { run(); });
}

WalCheckpointer::~WalCheckpointer() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wanted_.notify_one();
  thread_.join();
  sqlite3_close(db_);
}

void WalCheckpointer::watch(sqlite3* writer) { sqlite3_wal_hook(writer, &WalCheckpointer::on_commit, this); }

int WalCheckpointer::on_commit(void* self, sqlite3*, const char*, int pages) {
  if (pages >= kPages) static_cast<WalCheckpointer*>(self)->wake();
  return SQLITE_OK;
}

void WalCheckpointer::wake() {
  {
    std::lock_guard lock(mutex_);
    if (due_) return;
    due_ = true;
  }
  wanted_.notify_one();
}

uint64_t WalCheckpointer::checkpoints() const {
  std::lock_guard lock(mutex_);
  return checkpoints_;
}

void WalCheckpointer::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wanted_.wait(lock, [&] { return due_ || stop_; });
    if (stop_) return;
    lock.unlock();
    // Passive: copies what no reader still needs, takes no lock the writer waits for. A busy
    // answer (another checkpoint under way) is retried on the next wake; the log grows meanwhile.
    sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, nullptr, nullptr);
    lock.lock();
    ++checkpoints_;
    due_ = false;
  }
}

}  // namespace trainshim::collector
