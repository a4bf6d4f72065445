#include "diff.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "format.hpp"

namespace trainshim::cli {

namespace {

std::string trimmed(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

// A process of a run, named by its rank and its place among the processes of that rank.
using ProcessKey = std::pair<int, int>;

std::map<ProcessKey, const ProcessReport*> processes_by_rank(const Report& report) {
  std::vector<const ProcessReport*> sorted;
  for (const auto& p : report.processes) sorted.push_back(&p);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ProcessReport* x, const ProcessReport* y) {
    return std::make_tuple(x->rank < 0, x->rank, x->host, x->pid) < std::make_tuple(y->rank < 0, y->rank, y->host, y->pid);
  });
  std::map<ProcessKey, const ProcessReport*> out;
  std::map<int, int> seen;
  for (const ProcessReport* p : sorted) out[{p->rank, seen[p->rank]++}] = p;
  return out;
}

// Ranks in report order: numbered ones ascending, then unranked ones.
bool rank_before(const ProcessKey& x, const ProcessKey& y) {
  return std::make_tuple(x.first < 0, x.first, x.second) < std::make_tuple(y.first < 0, y.first, y.second);
}

// Sites of one process with the same key, summed.
struct MergedSite {
  const SyncSite* longest = nullptr;  // the one that blocked longest: its line and kind
  int64_t calls = 0, blocked_ns = 0;
};

std::map<std::string, MergedSite> merged_sites(const RankSyncs& rs) {
  std::map<std::string, MergedSite> out;
  for (const auto* list : {&rs.hidden, &rs.explicit_})
    for (const SyncSite& site : *list) {
      MergedSite& m = out[site_identity(site)];
      if (!m.longest || site.blocked_ns > m.longest->blocked_ns) m.longest = &site;
      m.calls += site.calls;
      m.blocked_ns += site.blocked_ns;
    }
  return out;
}

RateUnit unit_of(const ProcessReport* a, const ProcessReport* b) {
  const bool a_steps = !a || a->sync_sites.steps.count > 0;
  const bool b_steps = !b || b->sync_sites.steps.count > 0;
  return (a || b) && a_steps && b_steps ? RateUnit::Step : RateUnit::Second;
}

double per_second(double amount, int64_t span_ns) { return span_ns > 0 ? amount * 1e9 / double(span_ns) : 0; }

std::optional<double> per_step(double amount, int64_t steps) {
  return steps > 0 ? std::optional<double>(amount / double(steps)) : std::nullopt;
}

double in_unit(RateUnit unit, const std::optional<double>& step_rate, double second_rate) {
  return unit == RateUnit::Step ? step_rate.value_or(0) : second_rate;
}

SiteSide site_side(const MergedSite& m, const RankSyncs& rs) {
  SiteSide s;
  s.present = true;
  s.line = m.longest->line;
  s.calls = m.calls;
  s.blocked_ns = m.blocked_ns;
  s.per_step = per_step(double(m.calls), rs.steps.count);
  s.per_second = per_second(double(m.calls), rs.span_ns);
  s.share = rs.span_ns > 0 ? double(m.blocked_ns) / double(rs.span_ns) : 0;
  return s;
}

// More or Less when B differs from A by more than `relative` of A and more than `absolute`.
Change compare(double a, double b, double relative, double absolute) {
  const double d = b - a;
  if (std::fabs(d) <= absolute || std::fabs(d) <= relative * std::fabs(a)) return Change::Same;
  return d > 0 ? Change::More : Change::Less;
}

SiteStatus site_status(const SiteDiff& s) {
  if (!s.a.present) return SiteStatus::Appeared;
  if (!s.b.present) return SiteStatus::Disappeared;
  const Change rate = compare(s.rate_a, s.rate_b, kRateRelative, kRateAbsolute);
  const Change share = compare(s.a.share, s.b.share, 0, kSharePoints);
  if (rate != Change::Same && share != (rate == Change::More ? Change::Less : Change::More))
    return rate == Change::More ? SiteStatus::MoreFrequent : SiteStatus::LessFrequent;
  if (share != Change::Same) return share == Change::More ? SiteStatus::Costlier : SiteStatus::Cheaper;
  return SiteStatus::Unchanged;
}

int status_order(SiteStatus s) {
  switch (s) {
    case SiteStatus::Appeared: return 0;
    case SiteStatus::Disappeared: return 1;
    case SiteStatus::MoreFrequent:
    case SiteStatus::Costlier: return 2;
    case SiteStatus::LessFrequent:
    case SiteStatus::Cheaper: return 3;
    case SiteStatus::Unchanged: return 4;
  }
  return 5;
}

void diff_sites(const ProcessReport* pa, const ProcessReport* pb, int rank, std::vector<SiteDiff>& out) {
  const auto ma = pa ? merged_sites(pa->sync_sites) : std::map<std::string, MergedSite>{};
  const auto mb = pb ? merged_sites(pb->sync_sites) : std::map<std::string, MergedSite>{};
  const RateUnit unit = unit_of(pa, pb);
  std::map<std::string, std::pair<const MergedSite*, const MergedSite*>> keys;
  for (const auto& [k, m] : ma) keys[k].first = &m;
  for (const auto& [k, m] : mb) keys[k].second = &m;
  for (const auto& [k, pair] : keys) {
    const auto [a, b] = pair;
    SiteDiff s;
    s.rank = rank;
    s.key = k;
    s.unit = unit;
    // The newer run names it when it has it: its kind (a site may change kind with its operation's rules).
    const SyncSite& named = b ? *b->longest : *a->longest;
    s.kind = named.classification.kind;
    s.operation = named.classification.operation;
    s.file = named.file;
    s.function = named.function;
    s.source = trimmed(named.source);
    if (a) s.a = site_side(*a, pa->sync_sites);
    if (b) s.b = site_side(*b, pb->sync_sites);
    s.rate_a = in_unit(unit, s.a.per_step, s.a.per_second);
    s.rate_b = in_unit(unit, s.b.per_step, s.b.per_second);
    s.status = site_status(s);
    out.push_back(std::move(s));
  }
}

RankSide rank_side(const ProcessReport* p, bool first_of_rank, const Report& report) {
  RankSide s;
  if (!p) return s;
  const RankSyncs& rs = p->sync_sites;
  s.present = true;
  s.pid = p->pid;
  s.steps = rs.steps.count;
  s.step_ns = rs.steps.step_ns;
  s.span_ns = rs.span_ns;
  // The collective analysis is by rank: it belongs to the first process of the rank.
  if (first_of_rank)
    for (const RankWaits& w : report.waits.analysis.ranks)
      if (w.rank == p->rank) {
        s.collectives = w.collectives;
        s.waited_ns = w.waited_ns;
        s.last_count = w.last_count;
      }
  s.wait_per_step_ns = per_step(double(s.waited_ns), s.steps);
  s.wait_per_second_ns = per_second(double(s.waited_ns), s.span_ns);
  s.last_fraction = s.collectives ? double(s.last_count) / double(s.collectives) : 0;
  s.straggler = first_of_rank && p->rank >= 0 && report.waits.analysis.straggler == p->rank;
  for (const CopyRow& c : p->copies)
    if (c.host_memory == HostMemory::Pageable) s.pageable_bytes += c.bytes;
  s.pageable_bytes_per_step = per_step(double(s.pageable_bytes), s.steps);
  s.pageable_bytes_per_second = per_second(double(s.pageable_bytes), s.span_ns);
  return s;
}

std::string rank_label(int rank) { return rank < 0 ? std::string("?") : std::to_string(rank); }

std::string rate_text(const SiteSide& side, RateUnit unit, double rate) {
  if (!side.present) return "-";
  return unit == RateUnit::Step ? fmt::format("{:.2f}", rate) : fmt::format("{:.2f}/s", rate);
}

std::string share_text(const SiteSide& side) {
  return side.present ? fmt::format("{:.1f} %", 100 * side.share) : std::string("-");
}

std::string blocked_text(const SiteSide& side) { return side.present ? human_duration(side.blocked_ns) : "-"; }

std::string location_text(const SiteDiff& s) {
  const int line = s.b.present ? s.b.line : s.a.line;
  std::string where = s.file.empty() ? std::string("?") : fmt::format("{}:{}", s.file, line);
  if (s.a.present && s.b.present && s.a.line != s.b.line) where += fmt::format(" (A: line {})", s.a.line);
  if (!s.function.empty()) where += " in " + s.function;
  if (!s.source.empty()) where += ": " + s.source;
  return where;
}

std::string step_text(const RankSide& s) {
  if (!s.present) return "-";
  return s.steps > 0 ? human_duration(s.step_ns) : std::string("no steps");
}

std::string wait_text(const RankSide& s, RateUnit unit, double v) {
  if (!s.present) return "-";
  return human_duration(std::llround(v)) + (unit == RateUnit::Second ? "/s" : "");
}

std::string last_text(const RankSide& s) {
  return s.present ? fmt::format("{:.1f} %", 100 * s.last_fraction) : std::string("-");
}

std::string pageable_text(const RankSide& s, RateUnit unit, double v) {
  if (!s.present) return "-";
  return human_bytes(std::llround(v)) + (unit == RateUnit::Second ? "/s" : "");
}

std::string rank_notes(const RankDiff& r) {
  std::vector<std::string> notes;
  if (!r.a.present) notes.push_back("only in B");
  if (!r.b.present) notes.push_back("only in A");
  if (r.a.straggler && r.b.straggler) notes.push_back("straggler in both");
  else if (r.b.straggler) notes.push_back("became the straggler");
  else if (r.a.straggler) notes.push_back("no longer the straggler");
  if (r.a.present && r.b.present) {
    if (r.wait != Change::Same) notes.push_back(r.wait == Change::More ? "waits more" : "waits less");
    if (r.pageable != Change::Same)
      notes.push_back(r.pageable == Change::More ? "more pageable copies" : "fewer pageable copies");
  }
  std::string out;
  for (const auto& n : notes) out += (out.empty() ? "" : ", ") + n;
  return out;
}

const char* unit_name(RateUnit unit) { return unit == RateUnit::Step ? "step" : "second"; }

const char* change_name(Change c) { return c == Change::More ? "more" : c == Change::Less ? "less" : "same"; }

nlohmann::ordered_json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json rank_json(int rank) { return rank < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(rank); }

nlohmann::ordered_json site_side_json(const SiteSide& s) {
  if (!s.present) return nullptr;
  return {{"line", s.line},
          {"calls", s.calls},
          {"per_step", optional_json(s.per_step)},
          {"per_second", s.per_second},
          {"blocked_ns", s.blocked_ns},
          {"share_of_step", s.share}};
}

nlohmann::ordered_json rank_side_json(const RankSide& s) {
  if (!s.present) return nullptr;
  return {{"pid", s.pid},
          {"steps", s.steps},
          {"step_ns", s.step_ns},
          {"span_ns", s.span_ns},
          {"collectives", s.collectives},
          {"waited_ns", s.waited_ns},
          {"wait_per_step_ns", optional_json(s.wait_per_step_ns)},
          {"wait_per_second_ns", s.wait_per_second_ns},
          {"last_count", s.last_count},
          {"last_fraction", s.last_fraction},
          {"straggler", s.straggler},
          {"pageable_bytes", s.pageable_bytes},
          {"pageable_bytes_per_step", optional_json(s.pageable_bytes_per_step)},
          {"pageable_bytes_per_second", s.pageable_bytes_per_second}};
}

}  // namespace

std::string status_name(SiteStatus status) { return std::string(kSiteStatusNames[std::size_t(status)]); }

bool is_worse(SiteStatus status) { return status == SiteStatus::MoreFrequent || status == SiteStatus::Costlier; }
bool is_better(SiteStatus status) { return status == SiteStatus::LessFrequent || status == SiteStatus::Cheaper; }

RunDiff diff_reports(const Report& a, const Report& b) {
  RunDiff diff;
  diff.job_a = a.job;
  diff.job_b = b.job;
  diff.database_a = a.database;
  diff.database_b = b.database;
  diff.straggler_a = a.waits.analysis.straggler;
  diff.straggler_b = b.waits.analysis.straggler;

  const auto pa = processes_by_rank(a);
  const auto pb = processes_by_rank(b);
  std::vector<ProcessKey> keys;
  for (const auto& [k, p] : pa) keys.push_back(k);
  for (const auto& [k, p] : pb)
    if (!pa.count(k)) keys.push_back(k);
  std::sort(keys.begin(), keys.end(), rank_before);

  for (const ProcessKey& k : keys) {
    const auto ia = pa.find(k);
    const auto ib = pb.find(k);
    const ProcessReport* x = ia == pa.end() ? nullptr : ia->second;
    const ProcessReport* y = ib == pb.end() ? nullptr : ib->second;
    diff_sites(x, y, k.first, diff.sites);

    RankDiff r;
    r.rank = k.first;
    r.unit = unit_of(x, y);
    r.a = rank_side(x, k.second == 0, a);
    r.b = rank_side(y, k.second == 0, b);
    r.wait_a = in_unit(r.unit, r.a.wait_per_step_ns, r.a.wait_per_second_ns);
    r.wait_b = in_unit(r.unit, r.b.wait_per_step_ns, r.b.wait_per_second_ns);
    r.pageable_a = in_unit(r.unit, r.a.pageable_bytes_per_step, r.a.pageable_bytes_per_second);
    r.pageable_b = in_unit(r.unit, r.b.pageable_bytes_per_step, r.b.pageable_bytes_per_second);
    if (x && y) {
      r.wait = compare(r.wait_a, r.wait_b, kRateRelative, double(kWaitAbsoluteNs));
      r.pageable = compare(r.pageable_a, r.pageable_b, kRateRelative, double(kPageableAbsoluteBytes));
    }
    diff.ranks.push_back(std::move(r));
  }

  // Within a group, the largest change of share first, then the largest share.
  std::stable_sort(diff.sites.begin(), diff.sites.end(), [](const SiteDiff& x, const SiteDiff& y) {
    const auto order = [](const SiteDiff& s) {
      return std::make_tuple(status_order(s.status), -std::fabs(s.b.share - s.a.share), -std::max(s.a.share, s.b.share));
    };
    return order(x) < order(y);
  });

  for (const SiteDiff& s : diff.sites) {
    if (s.status == SiteStatus::Appeared) ++diff.summary.appeared;
    else if (s.status == SiteStatus::Disappeared) ++diff.summary.disappeared;
    else if (is_worse(s.status)) ++diff.summary.worse;
    else if (is_better(s.status)) ++diff.summary.better;
    else ++diff.summary.unchanged;
  }
  return diff;
}

std::string summary_line(const DiffSummary& s) {
  return fmt::format("{} site{} appeared, {} disappeared, {} got worse", s.appeared, s.appeared == 1 ? "" : "s",
                     s.disappeared, s.worse);
}

std::string render_diff_text(const RunDiff& diff) {
  std::string out = fmt::format("trainshim diff: A = job {} ({})\n                B = job {} ({})\n", diff.job_a,
                                diff.database_a, diff.job_b, diff.database_b);

  out += "\nSync sites: calls per step (/s: per second, a run without steps), share of step time, blocked\n";
  if (diff.sites.empty()) out += "  no sync sites in either run\n";
  else
    out += fmt::format("  {:<14}{:<5}{:<9}{:<30}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10}\n", "status", "rank", "kind",
                       "operation", "calls A", "B", "share A", "B", "blocked A", "B");
  for (const SiteDiff& s : diff.sites) {
    out += fmt::format("  {:<14}{:<5}{:<9}{:<30}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10}\n", status_name(s.status),
                       rank_label(s.rank), s.kind == SyncKind::Hidden ? "hidden" : "explicit", s.operation,
                       rate_text(s.a, s.unit, s.rate_a), rate_text(s.b, s.unit, s.rate_b), share_text(s.a),
                       share_text(s.b), blocked_text(s.a), blocked_text(s.b));
    out += fmt::format("      at {}\n", location_text(s));
  }

  if (!diff.ranks.empty()) {
    out += "\nRanks: step time, collective wait and pageable bytes per step (/s: per second), last to arrive\n";
    out += fmt::format("  {:<6}{:>10}{:>10}{:>11}{:>11}{:>8}{:>8}{:>12}{:>12}\n", "rank", "step A", "B", "wait A", "B",
                       "last A", "B", "pageable A", "B");
    for (const RankDiff& r : diff.ranks) {
      const std::string notes = rank_notes(r);
      out += fmt::format("  {:<6}{:>10}{:>10}{:>11}{:>11}{:>8}{:>8}{:>12}{:>12}{}\n", rank_label(r.rank),
                         step_text(r.a), step_text(r.b), wait_text(r.a, r.unit, r.wait_a),
                         wait_text(r.b, r.unit, r.wait_b), last_text(r.a), last_text(r.b),
                         pageable_text(r.a, r.unit, r.pageable_a), pageable_text(r.b, r.unit, r.pageable_b),
                         notes.empty() ? "" : "   <- " + notes);
    }
  }
  out += fmt::format("\n{}\n", summary_line(diff.summary));
  return out;
}

nlohmann::ordered_json render_diff_json(const RunDiff& diff) {
  nlohmann::ordered_json doc;
  doc["format"] = "trainshim-diff/1";
  doc["a"] = {{"job", diff.job_a}, {"database", diff.database_a}, {"straggler", rank_json(diff.straggler_a)}};
  doc["b"] = {{"job", diff.job_b}, {"database", diff.database_b}, {"straggler", rank_json(diff.straggler_b)}};
  doc["thresholds"] = {{"rate_relative", kRateRelative},
                       {"rate_absolute", kRateAbsolute},
                       {"share_points", kSharePoints},
                       {"wait_absolute_ns", kWaitAbsoluteNs},
                       {"pageable_absolute_bytes", kPageableAbsoluteBytes}};
  doc["sites"] = nlohmann::ordered_json::array();
  for (const SiteDiff& s : diff.sites)
    doc["sites"].push_back({{"status", status_name(s.status)},
                            {"rank", rank_json(s.rank)},
                            {"kind", s.kind == SyncKind::Hidden ? "hidden" : "explicit"},
                            {"operation", s.operation},
                            {"file", s.file},
                            {"function", s.function},
                            {"source", s.source},
                            {"rate_unit", unit_name(s.unit)},
                            {"rate_a", s.rate_a},
                            {"rate_b", s.rate_b},
                            {"a", site_side_json(s.a)},
                            {"b", site_side_json(s.b)}});
  doc["ranks"] = nlohmann::ordered_json::array();
  for (const RankDiff& r : diff.ranks)
    doc["ranks"].push_back({{"rank", rank_json(r.rank)},
                            {"rate_unit", unit_name(r.unit)},
                            {"wait_ns_a", r.wait_a},
                            {"wait_ns_b", r.wait_b},
                            {"wait_change", change_name(r.wait)},
                            {"pageable_bytes_a", r.pageable_a},
                            {"pageable_bytes_b", r.pageable_b},
                            {"pageable_change", change_name(r.pageable)},
                            {"a", rank_side_json(r.a)},
                            {"b", rank_side_json(r.b)}});
  doc["summary"] = {{"appeared", diff.summary.appeared},
                    {"disappeared", diff.summary.disappeared},
                    {"worse", diff.summary.worse},
                    {"better", diff.summary.better},
                    {"unchanged", diff.summary.unchanged},
                    {"line", summary_line(diff.summary)}};
  return doc;
}

}  // namespace trainshim::cli
