#pragma once
// The report's findings grouped into root causes, each once, with what it costs the job's step and
// the step predicted without it. What fixing a cause removes comes from the ranks' step breakdowns
// (step_breakdown.hpp): its parts, taken off the own work of the ranks it is on (a straggler's input
// time, a sync's bubble and blocked time). The job's steps are then replayed one by one: the
// collectives tie the ranks' steps together, so each step lasts as long as its slowest rank's own
// work, and the others' waits for that rank shrink with it.
#include <cstdint>
#include <string>
#include <vector>

#include "diagnose/finding_kind.hpp"
#include "diagnose/setup.hpp"

namespace trainshim::cli {

struct Report;

// Remedies in words, "; " between them: a finding's or a cause's advice.
inline std::string join_remedies(const std::vector<std::string>& remedies) {
  std::string out;
  for (const std::string& r : remedies) out += (out.empty() ? "" : "; ") + r;
  return out;
}

// High: >= 10 % of the job's step; medium: >= 2 %; low: less; advice: no measured cost.
enum class CauseSeverity { High, Medium, Low, Advice };

// What a root cause is: the straggler's input pipeline, a straggler late for another reason, a
// rank (not the straggler) waiting for its input, pageable copies with the blocking uploads, one
// sync line on every rank it is on, or one finding alone (a hang, a setup item, lost records, ...).
enum class CauseKind { InputPipeline, Straggler, Input, PageableInput, HiddenSync, Finding };

struct RootCause {
  CauseKind kind = CauseKind::Finding;
  FindingKind finding{};          // Finding: the finding's kind
  SetupItemKind setup_item{};     // a Setup finding's item
  std::string site, operation;    // HiddenSync: the sync's location ("file:line in function") and operation
  std::string title;              // "rank 1's input pipeline", "Tensor.item() at train.py:66 in main"
  int rank = -1;                  // the rank it is on, -1 when several or none
  std::vector<int> ranks;         // the ranks whose step it lengthens (the waiting ones too)
  int64_t cost_ns_per_step = 0;   // the job's step less the predicted one; 0: not measured
  double share = 0;               // of the job's step
  int64_t predicted_step_ns = 0;  // the job's step without it; 0 when not measured
  CauseSeverity severity = CauseSeverity::Advice;
  std::vector<std::string> evidence;  // the findings it groups, in their words
  std::vector<std::string> remedies;  // what to do, in order
  std::string advice() const { return join_remedies(remedies); }
  // What names it from one run to the next (diff): its kind, rank and, for a sync, the operation,
  // file and function, never the line number (an unrelated edit above it must not make it new).
  std::string identity;
};

struct Diagnosis {
  int64_t step_ns = 0;            // the job's step: its slowest rank's (step breakdowns); 0 without
  int step_rank = -1;             // that rank
  std::vector<RootCause> causes;  // by cost, then severity
  // Each of the report's findings' severity, in report.findings' order: that of the cause it is
  // evidence of (load_report puts it on each finding).
  std::vector<CauseSeverity> finding_severity;
};

// "input_pipeline", "straggler", "input", "pageable_input", "hidden_sync", or the finding's kind
// ("hang", "fp32_gemm", "setup_pinned_memory"): the cause's name in JSON and in its identity.
std::string cause_name(const RootCause& cause);

// Needs the report's findings and step breakdowns.
Diagnosis diagnose(const Report& report);

// The severity of a share of the step (negative: not measured).
CauseSeverity severity_of(double share);
// "high", "medium", "low", "advice".
const char* cause_severity_name(CauseSeverity severity);

}  // namespace trainshim::cli
