#pragma once
// `trainshim diff A.db B.db`: two runs side by side (A before, B after), per sync site and per rank.
// How sites and ranks are matched and judged: docs/formats.md, "The diff".
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

inline constexpr double kRateRelative = 0.10;                 // 10 % of A
inline constexpr double kRateAbsolute = 0.05;                 // calls per step (or per second)
inline constexpr double kSharePoints = 0.01;                  // 1 % of the step (or of a second)
inline constexpr int64_t kWaitAbsoluteNs = 1'000'000;         // 1 ms per step (or per second)
inline constexpr int64_t kPageableAbsoluteBytes = 1'048'576;  // 1 MiB per step (or per second)

enum class SiteStatus { Appeared, Disappeared, MoreFrequent, LessFrequent, Costlier, Cheaper, Unchanged };
// Entry i names value i.
inline constexpr std::string_view kSiteStatusNames[] = {"appeared", "disappeared", "more_frequent", "less_frequent",
                                                        "costlier", "cheaper",     "unchanged"};
static_assert(std::size(kSiteStatusNames) == std::size_t(SiteStatus::Unchanged) + 1, "a name for every status");
std::string status_name(SiteStatus status);  // "appeared", "more_frequent", ...
bool is_worse(SiteStatus status);            // more_frequent, costlier
bool is_better(SiteStatus status);           // less_frequent, cheaper

enum class RateUnit { Step, Second };

// One site in one run; present false (and every figure 0) when the run has no such site.
struct SiteSide {
  bool present = false;
  int line = 0;
  int64_t calls = 0, blocked_ns = 0;
  std::optional<double> per_step;  // calls per step, empty when the run found no steps
  double per_second = 0;           // calls per second of the span
  double share = 0;                // blocked_ns / span_ns
  // Blocked time per step (per second when either run found no steps): what a site costs, which a
  // share of a shorter step overstates.
  double blocked_per_unit_ns = 0;
};

struct SiteDiff {
  SiteStatus status = SiteStatus::Unchanged;
  int rank = -1;
  SyncKind kind = SyncKind::Hidden;
  std::string key, operation, file, function, source;
  RateUnit unit = RateUnit::Step;  // of rate_a/rate_b and of the frequency comparison
  double rate_a = 0, rate_b = 0;   // calls per unit
  SiteSide a, b;
};

// One rank in one run; present false (and every figure 0) when the run has no such rank.
struct RankSide {
  bool present = false;
  int64_t pid = 0;
  int64_t steps = 0, step_ns = 0, span_ns = 0;
  int64_t collectives = 0, waited_ns = 0, last_count = 0;
  std::optional<double> wait_per_step_ns;  // empty without steps
  double wait_per_second_ns = 0;
  double last_fraction = 0;  // last_count / collectives
  bool straggler = false;
  int64_t pageable_bytes = 0;
  std::optional<double> pageable_bytes_per_step;
  double pageable_bytes_per_second = 0;
};

enum class Change { Less = -1, Same = 0, More = 1 };

struct RankDiff {
  int rank = -1;
  RateUnit unit = RateUnit::Step;
  double wait_a = 0, wait_b = 0;          // collective wait, ns per unit
  double pageable_a = 0, pageable_b = 0;  // pageable bytes per unit
  Change wait = Change::Same, pageable = Change::Same;
  RankSide a, b;
};

enum class CauseStatus { Fixed, New, Worse, Better, Unchanged };
// Entry i names value i.
inline constexpr std::string_view kCauseStatusNames[] = {"fixed", "new", "worse", "better", "unchanged"};
static_assert(std::size(kCauseStatusNames) == std::size_t(CauseStatus::Unchanged) + 1, "a name for every status");

// A root cause measured in either run (report's "What to fix first"), matched by its identity: it
// costs a run's step when at least kSharePoints of it; worse or better when its cost moved by more
// than kRateRelative of A's and kSharePoints of A's step.
struct CauseDiff {
  CauseStatus status = CauseStatus::Unchanged;
  std::string identity, title;     // the title of B's, else A's
  int64_t cost_a = 0, cost_b = 0;  // ns per step; 0 where the run does not have it
};
std::string status_name(CauseStatus status);  // "fixed", "new", ...

struct DiffSummary {
  int64_t appeared = 0, disappeared = 0, worse = 0, better = 0, unchanged = 0;
  int64_t causes_fixed = 0, causes_new = 0, causes_worse = 0, causes_better = 0;
  // The job's step in each run: the report's (its slowest rank's step breakdown; else the slowest
  // rank's steps found); 0 when the run found no steps.
  int64_t step_ns_a = 0, step_ns_b = 0;
};

struct RunDiff {
  std::string job_a, job_b, database_a, database_b;
  int straggler_a = -1, straggler_b = -1;
  std::vector<SiteDiff> sites;    // appeared, disappeared, worse, better, unchanged; then by rank, key
  std::vector<RankDiff> ranks;    // by rank (unranked last), as in the report
  std::vector<CauseDiff> causes;  // fixed, new, worse, better, unchanged; then by the larger cost
  DiffSummary summary;
};

RunDiff diff_reports(const Report& a, const Report& b);

}  // namespace trainshim::cli
