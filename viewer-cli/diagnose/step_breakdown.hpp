#pragma once
// Each rank's step split into disjoint parts that add up to it: what its wall time went to. With
// the GPU timeline the parts are measured on the GPU's own records over the covered steps: the GPU
// busy with the rank's compute, in communication (less what it waited there for late ranks), and
// idle by cause. A sync's blocked time is never a part of its own: while the host blocks, the GPU
// is computing, communicating or waiting for a peer, and that is where the time goes; only the
// idle time after the sync returned (its bubble) is the sync's. Without the timeline the parts are
// estimated from the host's records and the collectives' GPU-side durations.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyse/collectives.hpp"
#include "analyse/gpu_timeline.hpp"
#include "analyse/host.hpp"
#include "analyse/syncs.hpp"

namespace trainshim::cli {

enum class StepPart {
  Compute,              // GPU busy with the rank's own kernels and copies
  Communication,        // GPU in collectives, less the waits for late ranks
  WaitingForStraggler,  // GPU in collectives where the straggler arrived last, waiting for it
  WaitingForPeers,      // the same, waiting for another late rank (one part per rank, the minor ones as one)
  Input,                // GPU idle until the step's input arrived
  Sync,                 // GPU idle after a host sync returned (its bubble), by the sync's line
  PageableCopy,         // GPU idle while the host copied from or to pageable memory
  HostInCollective,     // GPU idle while the host was blocked in a collective call
  LaunchBound,          // GPU idle while the host was busy between launches
  NotToldApart,         // without the GPU timeline: GPU work and host work, not told apart
};

struct StepShare {
  StepPart part = StepPart::Compute;
  std::string site;  // Sync: the sync's line, when known
  int rank = -1;     // WaitingForStraggler: the straggler; WaitingForPeers: the rank waited for (-1: several)
  int64_t ns_per_step = 0;
  double share = 0;  // of the step
};

// Steps longer than this many times the median step are left out of the breakdown: start-up, a
// checkpoint, an evaluation; one-off time that no step repeats.
inline constexpr int64_t kLongStepFactor = 3;

struct StepBreakdown {
  bool measured = false;         // on the GPU's records; else estimated from the host's
  int64_t steps = 0;             // the steps it is over
  int64_t long_steps = 0;        // steps left out, over kLongStepFactor times the median
  int64_t step_ns = 0;           // the mean length of the steps it is over
  std::vector<StepShare> parts;  // largest first; the shares add up to 1

  // A part's time per step, over its sites and ranks; 0 when it has none.
  int64_t ns_per_step(StepPart part) const;
  // The part at one site (a sync's line; "" for the others), null when it has none.
  const StepShare* part_at(StepPart part, const std::string& site = "") const;
};

// "compute", "communication", "waiting_for_straggler", "waiting_for_peers", "input", "sync",
// "pageable_copy", "host_in_collective", "launch_bound", "not_told_apart" (the JSON keys).
const char* step_part_key(StepPart part);
// "GPU compute", "waiting for rank 1, the straggler", "sync bubble at train.py:88 in train", ...
std::string step_part_words(const StepShare& share);

// The GPU's communication time per step (its collectives' kernels), over the steps a breakdown
// keeps; 0 without the GPU timeline.
int64_t communication_ns_per_step(const GpuTimelineReport& gpu);

// The rank's breakdown; none when it has no steps. `waits`: the rank's collective waits, null when
// it has none; `straggler`: the job's straggler, -1 when none; `transfer_ns`: the shortest
// communication per step of the ranks on the GPU timeline (the collectives' own time; the rest is
// waiting for peers), 0 when not known.
std::optional<StepBreakdown> step_breakdown(const RankSyncs& syncs, const GpuTimelineReport& gpu,
                                            const HostReport& host, const RankWaits* waits, int straggler,
                                            int64_t transfer_ns = 0);

}  // namespace trainshim::cli
