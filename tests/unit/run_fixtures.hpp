#pragma once
// What the unit tests of the CLI need to write a run database by hand.
#include <map>
#include <memory>
#include <string>

#include "database.hpp"
#include "ingest.hpp"
#include "recent_writer.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::test {

// The header of a process of a job "unitjob" of `world_size` ranks (rank -1: no launcher), on a
// monotonic clock so that event times are nanoseconds as written. Its rings are never read.
inline std::unique_ptr<SegmentHeader> header_for(int rank, int pid, const char* host, int world_size = 2) {
  auto h = std::make_unique<SegmentHeader>();
  const std::string command = "python train.py --rank " + std::to_string(rank);
  init_segment_header(*h, 1, 1, 1, 1,
                      {.pid = pid,
                       .rank = rank,
                       .local_rank = rank < 0 ? -1 : rank,
                       .world_size = rank < 0 ? -1 : world_size,
                       .clock_kind = ClockKind::Monotonic,
                       .anchor_monotonic_ns = 1000,
                       .anchor_realtime_ns = 2000,
                       .host = host,
                       .job = "unitjob",
                       .command = command});
  return h;
}

// Stores records as the collector does (Collector::store and store_recent): every record counted
// in `calls`, the ones analyses need one by one in `events`, the most recent copies and polls of
// each process in `recent_events` (through the collector's RecentWriter, whole at each store()).
// Written by store(), before the database's commit.
class Records {
 public:
  explicit Records(collector::Database& db, uint32_t recent_events = 20000)
      : db_(db), recent_events_(recent_events), recent_writer_(db) {}

  void add(int64_t process, const EventRecord& record, uint64_t begin_ns, uint64_t end_ns) {
    ingest(process).add(record, begin_ns, end_ns);
  }

  void store() {
    for (auto& [process, ingest] : processes_) {
      db_.add_pass(process, *ingest);
      ingest->clear_pass();
      recent_writer_.queue(process, ingest->recent());
    }
    recent_writer_.write(collector::RecentWriter::kEverything);
  }

 private:
  collector::ProcessIngest& ingest(int64_t process) {
    auto& slot = processes_[process];
    if (!slot) {
      slot = std::make_unique<collector::ProcessIngest>(recent_events_);
      recent_writer_.track(process, slot->recent());
    }
    return *slot;
  }

  collector::Database& db_;
  uint32_t recent_events_;
  collector::RecentWriter recent_writer_;
  std::map<int64_t, std::unique_ptr<collector::ProcessIngest>> processes_;
};

}  // namespace trainshim::test
