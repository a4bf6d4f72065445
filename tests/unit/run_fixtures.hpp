#pragma once
// What the unit tests of the CLI need to write a run database by hand.
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "database.hpp"
#include "ingest.hpp"
#include "recent_writer.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::test {

// The header of a process of a two-rank job "unitjob" (rank -1: no launcher), on a monotonic
// clock so that event times are nanoseconds as written.
inline std::unique_ptr<SegmentHeader> header_for(int rank, int pid, const char* host) {
  auto h = std::make_unique<SegmentHeader>();
  h->magic = kSegmentMagic;
  h->format_version = kFormatVersion;
  h->pid = pid;
  h->rank = rank;
  h->local_rank = rank < 0 ? -1 : rank;
  h->world_size = rank < 0 ? -1 : 2;
  h->clock_kind = static_cast<uint32_t>(ClockKind::Monotonic);
  h->anchor_monotonic_ns = 1000;
  h->anchor_realtime_ns = 2000;
  std::strcpy(h->host, host);
  std::strcpy(h->job, "unitjob");
  std::snprintf(h->command, sizeof h->command, "python train.py --rank %d", rank);
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
