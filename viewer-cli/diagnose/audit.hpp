#pragma once
// `trainshim audit`: a run checked against limits (a policy) and, optionally, against a baseline
// run, with an exit code a CI job can act on and reports a CI system can show.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "diagnose/policy.hpp"
#include "diagnose/report_model.hpp"

namespace trainshim::cli {

// The format of a baseline document, and whether `document` is one (the fields audit reads). A
// /1 file, written before sites were named by their operation's key, is matched on its words.
inline constexpr const char* kBaselineFormat = "trainshim-baseline/2";
inline constexpr const char* kWordedBaselineFormat = "trainshim-baseline/1";
bool is_baseline(const nlohmann::json& document);

struct Violation {
  std::string rule;
  int rank = -1;
  std::string site;  // "file:line in function", empty for a rank-wide rule
  std::string message;
};

struct RuleResult {
  std::string rule;  // one JUnit test case per rank each
  std::string description;
  std::vector<Violation> violations;
};

struct AuditResult {
  std::string database;
  std::vector<RuleResult> rules;
  std::vector<int> ranks;  // the run's ranks, sorted (-1: processes started without a launcher)
  double seconds = 0;      // what reading and checking the run took
  bool passed() const;
};

// The baseline a later audit compares against: the run's sites and per-rank waits.
nlohmann::ordered_json baseline_of(const Report& report);

AuditResult audit(const Report& report, const Policy& policy, const nlohmann::json* baseline);

}  // namespace trainshim::cli
