#pragma once
// `trainshim diff A.db B.db`: two runs side by side (A before, B after), per sync site and per rank.
//
// Matching. A site is the same in both runs when its rank and its site_identity() (syncs.hpp) are: the operation,
// the user's file, function and source text, never the line number, so a line moved by an
// unrelated edit above it is the same site. Within one rank of one run, sites with the same key
// (the same text on two lines of one function, or a hidden and an explicit site of one frame) are
// summed into one, with the line of the one that blocked longest; the diff names a site (kind,
// operation, file, function, source) as run B has it, else as run A has it. Processes
// are matched by rank; processes with the same rank (unranked ones, rank -1, in particular) pair
// in report order (host, then pid). A rank present in one run only has all its sites appeared or
// disappeared.
//
// Rates. When both runs of a rank found steps, rates are per step; otherwise per second of the
// rank's span (first event to last), for both runs so that they compare. The share of a site is
// its blocked time over the rank's span, as in the report ("of step": per step, blocked time over
// step time is the same ratio).
//
// Site status, in this order:
//   appeared      only in B;  disappeared  only in A;
//   otherwise, with rate = calls per unit (step or second) and share = blocked share of the span:
//     the rate changed      when |B - A| > kRateRelative * A  AND  |B - A| > kRateAbsolute;
//     the share changed     when |B - A| > kSharePoints (an absolute difference of fractions);
//   more_frequent / less_frequent  when the rate changed and the share did not change the other way;
//   costlier / cheaper             when the share changed and the rate did not (or changed the
//                                   other way: the blocked time, which the step pays, decides);
//   unchanged                      otherwise.
// Worse: more_frequent, costlier. Better: less_frequent, cheaper.
//
// Rank figures (no status of their own beyond the changes below): collective wait per unit
// (RankWaits::waited_ns over the rank's steps, or per second), last-to-arrive fraction, whether it
// is the straggler, pageable bytes copied per unit (every copy whose host memory is pageable).
//   wait changed      when |B - A| > kRateRelative * A  AND  |B - A| > kWaitAbsoluteNs per unit;
//   pageable changed  when |B - A| > kRateRelative * A  AND  |B - A| > kPageableAbsoluteBytes per unit.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "report.hpp"

namespace trainshim::cli {

inline constexpr double kRateRelative = 0.10;                 // 10 % of A
inline constexpr double kRateAbsolute = 0.05;                 // calls per step (or per second)
inline constexpr double kSharePoints = 0.01;                  // 1 percentage point of the span
inline constexpr int64_t kWaitAbsoluteNs = 1'000'000;          // 1 ms per step (or per second)
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

struct DiffSummary {
  int64_t appeared = 0, disappeared = 0, worse = 0, better = 0, unchanged = 0;
};

struct RunDiff {
  std::string job_a, job_b, database_a, database_b;
  int straggler_a = -1, straggler_b = -1;
  std::vector<SiteDiff> sites;  // appeared, disappeared, worse, better, unchanged; then by rank, key
  std::vector<RankDiff> ranks;  // by rank (unranked last), as in the report
  DiffSummary summary;
};

RunDiff diff_reports(const Report& a, const Report& b);

// A compact table, appeared/disappeared/worse first, then the ranks, ending with the summary line.
std::string render_diff_text(const RunDiff& diff);
// "3 sites appeared, 1 disappeared, 2 got worse" (no trailing newline).
std::string summary_line(const DiffSummary& summary);
// The trainshim-diff/1 document.
nlohmann::ordered_json render_diff_json(const RunDiff& diff);

}  // namespace trainshim::cli
