#pragma once
// Copies the collector's write-ahead log into its database file from a connection and a thread of
// its own. Records leave a ring only once their pass is committed, so a commit must never wait for
// the disk: SQLite's automatic checkpoint runs inside the commit that crosses its threshold and
// syncs the log and the database file: one commit in 350 took 4-21 ms at 1 M records/s (a ring of
// 16,384 records lasts 16 ms there). A passive checkpoint runs beside the writer without blocking it.
#include <sqlite3.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace trainshim::collector {

class WalCheckpointer {
 public:
  // Log pages past which a checkpoint is asked for (SQLite's own automatic threshold).
  static constexpr int kPages = 1000;

  // Opens `path` again, refusing it unless it is still the file (device, inode) the writer has.
  // Throws std::runtime_error with what to do.
  WalCheckpointer(const std::string& path, dev_t device, ino_t inode);
  // Waits for a checkpoint under way, then stops.
  ~WalCheckpointer();
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  // Installs itself as `writer`'s WAL hook (which turns the writer's automatic checkpoint off):
  // after each commit that leaves kPages or more in the log, the thread is woken.
  void watch(sqlite3* writer);
  // Checkpoints done, whether they copied everything or not.
  uint64_t checkpoints() const;

 private:
  static int on_commit(void* self, sqlite3*, const char*, int pages);
  void wake();
  void run();

  sqlite3* db_ = nullptr;
  mutable std::mutex mutex_;
  std::condition_variable wanted_;
  bool due_ = false;
  bool stop_ = false;
  uint64_t checkpoints_ = 0;
  std::thread thread_;
};

}  // namespace trainshim::collector
