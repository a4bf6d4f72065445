#pragma once
// What the unit tests of the CLI need to write a run database by hand.
#include <cstdio>
#include <cstring>
#include <memory>

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

}  // namespace trainshim::test
