#pragma once
// `trainshim audit`: a run checked against limits (a policy) and, optionally, against a baseline
// run, with an exit code a CI job can act on and reports a CI system can show.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "report.hpp"

namespace trainshim::cli {

struct AllowedSite {
  std::string site;    // "file:line" (the end of the path) or a function name
  std::string reason;
};

// Limits; the defaults hold without a policy file (docs/formats.md, "The policy").
struct Policy {
  double hidden_syncs_per_step = 2.0;            // per rank, all hidden sync sites but allowed ones
  double blocked_share = 0.10;                   // per rank: hidden sync time / run time
  double pageable_bytes_per_step = 64.0 * (1 << 20);
  double wait_share = 0.25;                      // per rank: collective wait / run time
  int64_t dropped_events = 0;                    // per rank
  double calls_per_step_tolerance = 0.10;        // baseline: a site may grow this much (and 0.05 calls)
  double wait_tolerance = 0.20;                  // baseline: a rank's wait per step may grow this much (and 1 ms)
  std::vector<AllowedSite> allow;
};

// Reads a TOML policy; throws UsageError saying what is wrong and where.
Policy load_policy(const std::string& path);

struct Violation {
  std::string rule;
  int rank = -1;
  std::string site;  // "file:line in function", empty for a rank-wide rule
  std::string message;
};

struct RuleResult {
  std::string rule;         // one JUnit test case each
  std::string description;
  std::vector<Violation> violations;
};

struct AuditResult {
  std::string database;
  std::vector<RuleResult> rules;
  bool passed() const;
};

// The baseline a later audit compares against: the run's sites and per-rank waits.
nlohmann::ordered_json baseline_of(const Report& report);

AuditResult audit(const Report& report, const Policy& policy, const nlohmann::json* baseline);

std::string render_audit_text(const AuditResult& result);
std::string render_audit_junit(const AuditResult& result);
std::string render_audit_markdown(const AuditResult& result);
nlohmann::ordered_json render_audit_json(const AuditResult& result);

}  // namespace trainshim::cli
