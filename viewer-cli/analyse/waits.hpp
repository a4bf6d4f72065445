#pragma once
// The report's collective waits read from the databases: each process's collective calls and GPU
// timings loaded and handed to the analysis of collectives.hpp, plus what the analysis does not
// see (what the straggler's host was doing, untimed and captured collectives, point-to-point).
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "analyse/collectives.hpp"
#include "analyse/host.hpp"
#include "analyse/steps.hpp"
#include "store/counters.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

struct HostActivity {
  std::string file, function;
  int line = 0;
  double share = 0;  // of the straggler's recorded calls inside its late windows
};

// One collective of one communicator on one rank, over the run: what NCCL's Inspector plugin
// reports per communicator (ext-profiler/inspector, inspectorComputeCollBw), from the calls' bytes
// and the GPU durations the shim timed around them.
struct CommunicatorCollective {
  uint64_t communicator = 0;
  std::string op;           // all_reduce, all_gather, ...
  uint32_t comm_size = 0;   // ranks in the communicator
  int64_t calls = 0;        // every call
  int64_t timed = 0;        // those with a GPU duration
  int64_t timed_bytes = 0;  // their bytes, as the call passes them: count x the type's size
  int64_t gpu_ns = 0;       // their GPU durations, the wait for the last rank included (as NCCL's)

  // Bytes per second of GPU time, as NCCL's Inspector and nccl-tests define them: the algorithm
  // bandwidth moves the collective's whole message (for all_gather, reduce_scatter, all_to_all,
  // gather and scatter, the call's per-rank count times the ranks); the bus bandwidth scales it by
  // what each link carries (2(n-1)/n for all_reduce, (n-1)/n for the gathers and scatters, 1 for
  // broadcast and reduce). 0 with no GPU time.
  double message_bytes() const;  // the timed calls' whole messages, as the algorithm bandwidth counts them
  double algorithm_bandwidth() const;
  double bus_bandwidth() const;
};

// One process's point-to-point calls (ncclSend, ncclRecv) over the run, and the GPU time of those
// timed: the shim times a group's point-to-point work once, on its first call.
struct PointToPointCalls {
  int64_t sends = 0, recvs = 0;
  int64_t send_bytes = 0, recv_bytes = 0;
  int64_t timed = 0, gpu_ns = 0;
};

// A process's collective calls and their GPU timings, read in one pass for both the step detection
// and the waits.
struct CollectiveCalls {
  std::vector<CollectiveCall> sequence;  // every call, in begin order
  // Calls outside a group launched on NCCL's thread (ncclInProgress).
  int64_t launched_in_progress = 0;
  std::map<uint64_t, int64_t> captured;  // calls captured into CUDA graphs, by communicator
  struct PointToPointCall {
    uint64_t communicator;
    uint32_t rank_in_comm, peer, n;  // n: the call's number among this pair's calls
    bool send;
  };
  std::vector<PointToPointCall> p2p;
  // The timings matched across ranks: collectives, and exchanges with every rank (all_to_all) as
  // a series of their own.
  std::vector<CollectiveTiming> timings;
  int64_t timed_in_progress = 0;  // timings of operations launched on NCCL's thread
  PointToPointCalls p2p_calls;
  int64_t exchanges = 0;
  // Per (communicator, api): its collectives, point-to-point calls aside.
  std::map<std::pair<uint64_t, int64_t>, CommunicatorCollective> by_communicator;
};

// The calls of the processes of one database, by process id. ranks: each process's global rank, -1
// when no launcher numbered it (its rank in each communicator stands in).
std::map<int64_t, CollectiveCalls> load_collective_calls(const RunDatabase& db, const std::map<int64_t, int>& ranks);
// One process's collective calls in time order (its CollectiveCalls::sequence), through the index.
std::vector<CollectiveCall> load_collective_sequence(const RunDatabase& db, int64_t process_id);

// One process's collective calls, with the database and rank they belong to, handed to load_waits.
struct ProcessCollectives {
  const RunDatabase* db;
  int64_t process_id;
  int rank;
  int64_t steps;  // the rank's steps, 0 when none were found
  // Where they start (Steps::starts_ns, which must outlive load_waits), to split its waits by step.
  std::span<const int64_t> step_starts_ns;
  CollectiveCalls collectives;  // its sequence is not read here: it may have been handed on
};

// Collectives of one communicator captured into CUDA graphs: they were seen once, at capture;
// their replays are not measured.
struct CapturedCollectives {
  uint64_t communicator = 0;
  int64_t collectives = 0;  // on the rank that captured most of them
  int64_t ranks = 0;        // ranks that captured some
};

// Point-to-point calls (ncclSend/ncclRecv), numbered per peer and reported on their own: they are
// not part of the collective matching. Send n of rank a to b meets receive n of b from a.
struct PointToPoint {
  int64_t sends = 0;
  int64_t recvs = 0;
  int64_t matched = 0;    // send/receive pairs seen on both ranks
  int64_t unmatched = 0;  // calls whose other side was not seen
  int64_t timed = 0;      // GPU timings of point-to-point work (one per communicator, stream and group)
  int64_t gpu_ns = 0;     // their sum
  // Timings of groups that exchanged with every rank of their communicator (all_to_all): matched
  // across ranks as collectives, so they count in the waits and the straggler.
  int64_t exchanges = 0;
};

struct WaitReport {
  CollectiveAnalysis analysis;
  std::vector<HostActivity> straggler_host;  // most frequent first
  // What the straggler's main thread was doing in its late windows, from its samples.
  std::optional<StragglerDoing> straggler_doing;
  UntimedCollectives untimed;  // the processes' counters
  // Operations launched on NCCL's thread (ncclInProgress: a non-blocking communicator's calls and
  // groups), and those of them that got no timing: the program did not wait for the launch with
  // ncclCommGetAsyncError before going on.
  int64_t launched_in_progress = 0;
  int64_t untimed_in_group_in_progress = 0;
  std::vector<CapturedCollectives> captured;  // by communicator
  PointToPoint p2p;
};

// The report's `collective_waits.untimed`.
nlohmann::ordered_json untimed_json(const WaitReport& waits);

// Takes the processes' timings over (they are the bulk of a large job's data).
WaitReport load_waits(std::vector<ProcessCollectives>& processes);

}  // namespace trainshim::cli
