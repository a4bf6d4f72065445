#pragma once
// Writes each process's window of recent copies and polls into `recent_events` a slice per pass.
// Rewriting a whole window (20,000 rows) inside one pass held that pass's commit for 20-45 ms,
// longer than a ring lasts (records leave a ring only once their pass is committed). The window is
// a copy of records already counted in `calls`, so it may trail them: what a window gained since it
// was last queued is queued when due (every recent_flush, at the process's end, at exit) and written
// a slice per pass, the process's oldest rows going as new ones come, so that at every commit the
// table holds at most the window's capacity of rows per process, oldest first, none twice. A
// collector that dies loses what was queued and not yet written (its replacement goes on from
// what was).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <vector>

#include "database.hpp"
#include "ingest.hpp"

namespace trainshim::collector {

class RecentWriter {
 public:
  // Rows written per pass while a live producer's records wait in their rings.
  static constexpr std::size_t kRowsPerPass = 256;
  static constexpr std::size_t kEverything = std::numeric_limits<std::size_t>::max();

  explicit RecentWriter(Database& database) : database_(database) {}
  // From here on the window of `process_id` is written by this writer; what the table already holds
  // of it (a resumed process: what a dead collector wrote) counts towards its capacity.
  void track(int64_t process_id, const RecentWindow& window);
  // Queues what the window gained since it was last queued (at most its capacity).
  void queue(int64_t process_id, const RecentWindow& window);
  // The process has ended: it is forgotten once its queue is written.
  void finish(int64_t process_id);
  // Writes up to `budget` queued rows, in the current transaction. Returns how many it wrote.
  std::size_t write(std::size_t budget);
  std::size_t queued() const;

 private:
  struct Rows {  // rowids first..last of the process, all its own
    int64_t first;
    int64_t last;
  };
  struct Process {
    uint32_t capacity = 0;
    uint64_t queued_up_to = 0;  // window.pushed() when last queued
    std::vector<StoredEvent> queue;
    std::size_t next = 0;       // the first of `queue` not written
    std::deque<Rows> in_table;  // oldest first
    uint64_t rows_in_table = 0;
    bool finished = false;
    // A row of the process now in the table, newest so far.
    void note_row(int64_t rowid);
  };
  void forget_oldest(int64_t process_id, Process& p, uint64_t count);

  Database& database_;
  std::map<int64_t, Process> processes_;
};

}  // namespace trainshim::collector
