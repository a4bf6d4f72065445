#pragma once
// Where each step's GPU time went, from the GPU's own activity (CUPTI's records in
// `gpu_activities`): how much of each step the GPU was busy, the idle gaps and what the host was
// doing in each (its cause), and the GPU idle time after each sync (its bubble).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "analyse/kernels.hpp"
#include "analyse/syncs.hpp"
#include "store/counters.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

// What kept the GPU idle in a gap, by the first rule that holds (common to the text and JSON):
//   DataLoading   the gap ends with the step's first H2D input copy (site: that copy's line)
//   Sync          a host sync returned in the gap (site: the sync's line)
//   PageableCopy  the host was inside a pageable copy during the gap (site: the copy's line)
//   Collective    the host was blocked in a collective call during the gap (site: the call's line)
//   Host          none of these: the host was busy between enqueues (launch-bound)
enum class IdleCause { DataLoading, Sync, PageableCopy, Collective, Host };
inline constexpr int kIdleCauseCount = 5;

// "data_loading", "sync", "pageable_copy", "collective", "host" (the JSON keys).
const char* idle_cause_key(IdleCause cause);
// "data loading", "sync", "pageable copy", "collective", "host".
const char* idle_cause_words(IdleCause cause);

struct IdleGap {
  int64_t step = 0;      // the step's number among all the rank's steps (0: the first step found)
  int64_t start_ns = 0;  // from the step's start
  int64_t duration_ns = 0;
  IdleCause cause = IdleCause::Host;
  std::string site;  // "file:line in function" where the host came back; empty when not known
};

// The gaps above the threshold of one cause that ended at one site: a starved rank has one a step,
// the same each time, which a reader wants once with its count.
struct IdleGapGroup {
  IdleCause cause = IdleCause::Host;
  std::string site;
  int64_t count = 0, total_ns = 0, shortest_ns = 0, longest_ns = 0;
  int64_t steps = 0;  // the covered steps with one or more of them
  int64_t first_step = 0, last_step = 0;
};

// One covered step's figures, as GpuTimelineReport sums them.
struct CoveredStep {
  int64_t step = 0;  // its number among all the rank's steps
  int64_t ns = 0, busy_ns = 0, communication_ns = 0;
  int64_t idle_by_cause_ns[kIdleCauseCount] = {};
  int64_t input_after_sync_ns = 0;  // of the data-loading idle time, what followed a sync's return
};

struct GpuTimelineReport {
  std::string timeline;  // processes.gpu_timeline: "on", "taken", ...; empty: not started
  // Why there are no figures, in words; empty when there are.
  std::string why_none;
  int64_t covered_steps = 0;     // steps wholly inside the windows the timeline was on
  int64_t covered_ns = 0;        // their time
  int64_t busy_ns = 0;           // some activity ran on the GPU: compute and communication
  int64_t communication_ns = 0;  // only NCCL kernels ran (names starting "nccl")
  int64_t idle_ns = 0;
  int64_t idle_by_cause_ns[kIdleCauseCount] = {};
  // The sync idle time by the line of the sync the GPU waited on, largest first; they add up to
  // idle_by_cause_ns[Sync] (a line may be empty when the sync's site is not known).
  std::vector<std::pair<std::string, int64_t>> sync_idle_by_site;
  std::vector<CoveredStep> steps;  // each covered step, in time order
  // The data-loading idle time that followed a sync's return (the host loaded the batch, or did work
  // of its own first), by the sync's line.
  std::vector<std::pair<std::string, int64_t>> input_after_sync_by_site;
  int64_t gap_threshold_ns = 0;  // of a step of the median length
  std::vector<IdleGap> gaps;     // above the threshold, the 10 longest, longest first
  int64_t gaps_above_threshold = 0;
  std::vector<IdleGapGroup> gap_groups;  // every gap above the threshold, by cause and site, most time first
  // The data-loading gaps: in how many covered steps one was above the threshold, and whether
  // the input copies that ended them were from pageable memory.
  int64_t data_loading_steps = 0;
  bool pageable_input = false;
  std::string input_site;     // the upload's line most data-loading gaps ended with
  KernelSummary kernels;      // every recorded kernel, not only the covered steps'
  GpuRecordCounters records;  // what CUPTI dropped and the collector did not keep

  bool has_figures() const { return covered_ns > 0; }
  double share(int64_t ns) const { return covered_ns > 0 ? double(ns) / double(covered_ns) : 0; }
  int64_t per_step(int64_t ns) const { return covered_steps > 0 ? ns / covered_steps : 0; }
};

// idle_gap_ns: the threshold of a reported gap; 0 for the default, max(1 ms, 5 % of the step).
// Fills each sync site's bubble in `syncs` and orders its sites by bubble (rank_by_bubble).
GpuTimelineReport load_gpu_timeline(const RunDatabase& db, int64_t process_id, const std::string& timeline,
                                    RankSyncs& syncs, int64_t idle_gap_ns);

// What a timeline state means for the report, in words, and what to do about it; empty for "on".
std::string gpu_timeline_state_words(const std::string& timeline);
std::string gpu_timeline_state_advice(const std::string& timeline);

}  // namespace trainshim::cli
