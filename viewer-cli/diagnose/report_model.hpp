#pragma once
// What `trainshim report` says about a run, read from its databases: the model report_text and
// report_json render, and audit and diff compare.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyse/gpu_timeline.hpp"
#include "analyse/host.hpp"
#include "analyse/syncs.hpp"
#include "analyse/waits.hpp"
#include "diagnose/finding_kind.hpp"
#include "diagnose/root_causes.hpp"
#include "diagnose/setup.hpp"
#include "diagnose/step_breakdown.hpp"
#include "store/counters.hpp"
#include "store/rows.hpp"
#include "store/run_database.hpp"

namespace trainshim::cli {

struct ProcessReport {
  const RunDatabase* db = nullptr;  // the database it came from, and its id there
  int64_t id = 0;
  int rank = -1;  // -1: not started by a known launcher
  int local_rank = -1, world_size = -1;
  int64_t pid = 0;
  std::string host, command;
  std::string python_version;             // "3.11", "3.13t"; empty: no Python stack was looked for
  std::string python_stacks_unavailable;  // why its Python stacks could not be read; empty if they could
  bool ended = false;
  int64_t events = 0;
  int64_t last_progress_unix_ns = 0;  // its latest record's end that was not its sampler's; 0: none
  std::vector<CopyRow> copies;
  std::vector<SyncRow> api_waits;  // per API: its syncs, frees and polls
  std::vector<CollectiveRow> collectives;
  std::vector<CommunicatorCollective> communicator_collectives;  // by communicator, then op
  PointToPointCalls p2p;
  LostEvents lost;
  RankSyncs sync_sites;  // its sync, pageable-copy and poll sites
  GpuTimelineReport gpu;
  HostReport host_report;                       // what its sampler saw
  std::optional<StepBreakdown> step_breakdown;  // none without steps
};

struct Finding {
  FindingKind kind = FindingKind::HiddenSync;
  int rank = -1;
  int64_t calls = 0, bytes = 0, cost_ns = 0;
  std::string message;
  std::vector<std::string> remedies;  // what to do, in order
  schema::HangKind hang_kind{};       // a hang's kind
  std::string stacks;                 // a hang's ranks' stacks
  std::string site{}, operation{};    // hidden_sync: the site's location and its operation
  Direction copy_direction{};         // pageable_copy: the copies' direction
  SetupItemKind setup_item{};         // Setup: the item that is off
  // That of the root cause it is evidence of (load_report sets it from the diagnosis).
  CauseSeverity severity = CauseSeverity::Advice;
  // Its remedies in words, "; " between them.
  std::string advice() const { return join_remedies(remedies); }
};

// "hidden_sync", "setup_numa_affinity": the finding's kind in JSON.
std::string finding_kind_name(const Finding& finding);

struct Report {
  std::string job, database;
  std::vector<ProcessReport> processes;  // by rank, then pid
  std::vector<CopyRow> total_copies;
  std::vector<SyncRow> total_syncs;
  std::vector<CollectiveRow> total_collectives;
  LostEvents total_lost;
  WaitReport waits;
  std::vector<HangRow> hangs;  // written by the collector while the job hung
  std::vector<Finding> findings;
  Diagnosis diagnosis;                          // the findings grouped into root causes, what each costs the job's step
  std::vector<std::string> stripped_libraries;  // PyTorch libraries without .symtab
  std::vector<SetupItem> setup;                 // the setup checklist, per process
};

// The report's measurements and each rank's step breakdown, without the diagnosis (setup, findings,
// root causes): load_report (diagnose/load_report.hpp) adds it. step_name: TRAINSHIM_STEP's value
// ("file:line" or a Python function), empty to detect steps. idle_gap_ns: the shortest GPU idle gap
// reported; 0: max(1 ms, 5 % of the step). Several databases (one per node of a job) merge into one.
Report read_report(const std::vector<const RunDatabase*>& databases, const std::string& step_name, int64_t idle_gap_ns);

// The report of one rank of the job: its processes, setup items, findings and the root causes that
// touch it. What concerns the job as a whole stays: the collective waits (every rank's, the
// straggler among them), the hangs, the straggler's and the hangs' findings, the job's step and the
// totals over all ranks. False, and nothing changed,
// when the job has no such rank.
bool keep_only_rank(Report& report, int rank);

// The steps the first process of `rank` found, 0 when none (or no such rank).
int64_t steps_of_rank(const Report& report, int rank);

}  // namespace trainshim::cli
