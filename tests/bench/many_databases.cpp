// Writes the run databases of a large data-parallel job through the collector's own Database
// (so their format is the schema's), for scripts/bench/report-many: NODES databases of
// RANKS_PER_NODE ranks each, every rank making COLLECTIVES all-reduces on one world communicator
// with their GPU-side timings. Arrival jitter up to 50 us per rank and collective; one straggler
// rank (the middle one) is late by 30 ms in 99 % of the collectives. The records go through the
// collector's ProcessIngest as drained ones do (aggregated into `calls`, kept one by one in
// `events` where an analysis needs them); each database is written in one transaction per rank.
// Usage: many_databases DIR [NODES [RANKS_PER_NODE [COLLECTIVES]]]
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "database.hpp"
#include "ingest.hpp"
#include "trainshim/api.hpp"
#include "trainshim/protocol.hpp"

namespace {

using trainshim::Api;
using trainshim::EventRecord;
using trainshim::collector::Database;
using trainshim::collector::ProcessIngest;

constexpr uint64_t kWorldComm = 0x5eed'c0'77'a11ULL;
constexpr int64_t kBaseNs = 5'000'000, kLateNs = 30'000'000, kJitterNs = 50'000, kStepNs = 100'000'000;
constexpr uint64_t kElements = 25'000'000;  // a 100 MB gradient bucket of float32

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// When `rank` reaches collective `sequence`, after the step's start.
int64_t arrival_ns(uint32_t rank, uint32_t sequence, uint32_t straggler) {
  int64_t arrival = int64_t(splitmix(uint64_t(rank) << 32 | sequence) % (kJitterNs + 1));
  if (rank == straggler && splitmix(sequence) % 100 != 0) arrival += kLateNs;
  return arrival;
}

std::unique_ptr<trainshim::SegmentHeader> header_for(uint32_t rank, uint32_t local_rank, uint32_t world,
                                                     uint32_t node) {
  auto h = std::make_unique<trainshim::SegmentHeader>();
  char host[16];
  std::snprintf(host, sizeof host, "node%03u", node);
  const std::string command = "python train.py --local-rank " + std::to_string(local_rank);
  trainshim::init_segment_header(*h, 8, 65536, 16384, 2048,
                                 {.pid = int32_t(10'000 + local_rank),
                                  .rank = int32_t(rank),
                                  .local_rank = int32_t(local_rank),
                                  .world_size = int32_t(world),
                                  .clock_kind = trainshim::ClockKind::Monotonic,
                                  .anchor_monotonic_ns = 1'000'000'000,
                                  .anchor_realtime_ns = 1'780'000'000'000'000'000,
                                  .host = host,
                                  .job = "reportmany",
                                  .command = command});
  return h;
}

// What the collector does with a pass's records (Collector::store).
void store(Database& db, int64_t process, ProcessIngest& ingest) {
  db.add_pass(process, ingest);
  ingest.clear_pass();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [NODES [RANKS_PER_NODE [COLLECTIVES]]]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  const uint32_t nodes = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 128;
  const uint32_t per_node = argc > 3 ? uint32_t(std::strtoul(argv[3], nullptr, 10)) : 8;
  const uint32_t collectives = argc > 4 ? uint32_t(std::strtoul(argv[4], nullptr, 10)) : 10000;
  const uint32_t world = nodes * per_node;
  const uint32_t straggler = world / 2 + 3;

  // Every rank leaves a collective when the last one arrived (plus the transfer): its GPU-side
  // duration is that end minus its own arrival.
  std::vector<int64_t> last_arrival(collectives + 1, 0);
  for (uint32_t seq = 1; seq <= collectives; ++seq)
    for (uint32_t r = 0; r < world; ++r) last_arrival[seq] = std::max(last_arrival[seq], arrival_ns(r, seq, straggler));

  uint64_t rows = 0;
  for (uint32_t node = 0; node < nodes; ++node) {
    char name[64];
    std::snprintf(name, sizeof name, "trainshim-reportmany-node%03u.db", node);
    Database db((dir / name).string(), "reportmany");
    for (uint32_t local = 0; local < per_node; ++local) {
      const uint32_t rank = node * per_node + local;
      const int64_t process =
          db.add_process("trainshim-reportmany-" + std::to_string(rank), *header_for(rank, local, world, node));
      // Each node has its own clock: the ranks of a node share an offset, nodes differ.
      const int64_t clock0 = 1'000'000'000 + int64_t(splitmix(node) % 1'000'000'000);
      uint64_t stored = 0;
      ProcessIngest ingest(0);
      // The all-reduce's Python stack: DDP's bucket hook under the training step.
      db.add_python_stack(process, 1, false, 0);
      db.add_python_frame(process, 1, 0, "/usr/lib/python3/torch/distributed/distributed_c10d.py", "all_reduce", 2501,
                          "work = group.allreduce([tensor], opts)");
      db.add_python_frame(process, 1, 1, "/job/train.py", "train_step", 88, "loss.backward()");

      EventRecord init{};
      init.api = static_cast<uint16_t>(Api::ncclCommInitRank);
      init.tid = 10'000 + local;
      init.object = 0x7f00'0000'1000ULL + local;
      init.detail = kWorldComm;
      init.rank_in_comm = rank;
      init.comm_size = world;
      ingest.add(init, uint64_t(clock0), uint64_t(clock0 + 40'000'000));
      ++stored;

      EventRecord call{};
      call.tid = init.tid;
      call.bytes = kElements * 4;
      call.stream = 0x7f00'0000'2000ULL;
      call.object = kWorldComm;
      call.detail = uint64_t(ncclSum) << 8 | ncclFloat32;
      call.rank_in_comm = rank;
      call.comm_size = world;
      call.native_stack = 1;
      call.python_stack = 1;
      for (uint32_t seq = 1; seq <= collectives; ++seq) {
        const int64_t arrival = arrival_ns(rank, seq, straggler);
        const int64_t begin = clock0 + int64_t(seq) * kStepNs + arrival;
        call.api = static_cast<uint16_t>(Api::ncclAllReduce);
        call.sequence = seq;
        call.flags = 0;
        ingest.add(call, uint64_t(begin), uint64_t(begin + 12'000));
        EventRecord timing = call;
        timing.api = static_cast<uint16_t>(Api::ncclGpuTiming);
        timing.detail = uint64_t(last_arrival[seq] + kBaseNs - arrival);
        timing.native_stack = timing.python_stack = 0;
        ingest.add(timing, uint64_t(begin), uint64_t(begin + 12'000));
        stored += 2;
      }
      // One pass for the whole rank: the rows are the same however the records split into passes.
      store(db, process, ingest);
      Database::ProcessCounters counters;
      counters.events = stored;
      counters.ended = true;
      db.update_process(process, counters);
      db.commit();
      rows += stored;
    }
  }
  std::printf("rows=%llu\n", static_cast<unsigned long long>(rows));
  return 0;
}
