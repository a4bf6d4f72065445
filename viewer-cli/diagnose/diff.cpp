#include "diagnose/diff.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <utility>

#include "diagnose/present.hpp"

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
    return std::make_tuple(x->rank < 0, x->rank, x->host, x->pid) <
           std::make_tuple(y->rank < 0, y->rank, y->host, y->pid);
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

double in_unit(RateUnit unit, const std::optional<double>& step_rate, double second_rate) {
  return unit == RateUnit::Step ? step_rate.value_or(0) : second_rate;
}

SiteSide site_side(const MergedSite& m, const RankSyncs& rs, RateUnit unit) {
  SiteSide s;
  s.present = true;
  s.line = m.longest->line;
  s.calls = m.calls;
  s.blocked_ns = m.blocked_ns;
  s.per_step = per_step(double(m.calls), rs.steps.count);
  s.per_second = per_second(double(m.calls), rs.span_ns);
  s.share = share_of_span(m.blocked_ns, rs.span_ns);
  s.blocked_per_unit_ns =
      in_unit(unit, per_step(double(m.blocked_ns), rs.steps.count), per_second(double(m.blocked_ns), rs.span_ns));
  return s;
}

// More or Less when B differs from A by more than `relative` of A and more than `absolute`.
Change compare(double a, double b, double relative, double absolute) {
  const double d = b - a;
  if (std::fabs(d) <= absolute || std::fabs(d) <= relative * std::fabs(a)) return Change::Same;
  return d > 0 ? Change::More : Change::Less;
}

// `unit_ns`: the unit's length (the longer of the two runs' steps, or a second); a cost changes
// when it moves by more than kSharePoints of it and kRateRelative of A.
SiteStatus site_status(const SiteDiff& s, double unit_ns) {
  if (!s.a.present) return SiteStatus::Appeared;
  if (!s.b.present) return SiteStatus::Disappeared;
  const Change rate = compare(s.rate_a, s.rate_b, kRateRelative, kRateAbsolute);
  const Change cost = compare(s.a.blocked_per_unit_ns, s.b.blocked_per_unit_ns, kRateRelative, kSharePoints * unit_ns);
  if (rate != Change::Same && cost != (rate == Change::More ? Change::Less : Change::More))
    return rate == Change::More ? SiteStatus::MoreFrequent : SiteStatus::LessFrequent;
  if (cost != Change::Same) return cost == Change::More ? SiteStatus::Costlier : SiteStatus::Cheaper;
  return SiteStatus::Unchanged;
}

int status_order(SiteStatus s) {
  switch (s) {
    case SiteStatus::Appeared:
      return 0;
    case SiteStatus::Disappeared:
      return 1;
    case SiteStatus::MoreFrequent:
    case SiteStatus::Costlier:
      return 2;
    case SiteStatus::LessFrequent:
    case SiteStatus::Cheaper:
      return 3;
    case SiteStatus::Unchanged:
      return 4;
  }
  return 5;
}

void diff_sites(const ProcessReport* pa, const ProcessReport* pb, int rank, std::vector<SiteDiff>& out) {
  const auto ma = pa ? merged_sites(pa->sync_sites) : std::map<std::string, MergedSite>{};
  const auto mb = pb ? merged_sites(pb->sync_sites) : std::map<std::string, MergedSite>{};
  const RateUnit unit = unit_of(pa, pb);
  const double unit_ns =
      unit == RateUnit::Second
          ? 1e9
          : double(std::max(pa ? pa->sync_sites.steps.step_ns : 0, pb ? pb->sync_sites.steps.step_ns : 0));
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
    if (a) s.a = site_side(*a, pa->sync_sites, unit);
    if (b) s.b = site_side(*b, pb->sync_sites, unit);
    s.rate_a = in_unit(unit, s.a.per_step, s.a.per_second);
    s.rate_b = in_unit(unit, s.b.per_step, s.b.per_second);
    s.status = site_status(s, unit_ns);
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
  if (const RankWaits* w = first_of_rank ? report.waits.analysis.waits_of(p->rank) : nullptr) {
    s.collectives = w->collectives;
    s.waited_ns = w->waited_ns;
    s.last_count = w->last_count;
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

}  // namespace

std::string status_name(SiteStatus status) { return std::string(kSiteStatusNames[std::size_t(status)]); }
std::string status_name(CauseStatus status) { return std::string(kCauseStatusNames[std::size_t(status)]); }

namespace {

std::vector<CauseDiff> diff_causes(const Diagnosis& a, const Diagnosis& b) {
  std::map<std::string, CauseDiff> by_identity;
  std::vector<std::string> order;
  const auto take = [&](const Diagnosis& d, bool in_a) {
    for (const RootCause& c : d.causes) {
      if (c.predicted_step_ns <= 0) continue;  // not measured
      auto [it, added] = by_identity.try_emplace(c.identity);
      if (added) order.push_back(c.identity);
      it->second.identity = c.identity;
      it->second.title = c.title;
      (in_a ? it->second.cost_a : it->second.cost_b) += c.cost_ns_per_step;
    }
  };
  take(a, true);
  take(b, false);
  const auto costs = [](int64_t cost, int64_t step) { return step > 0 && double(cost) >= kSharePoints * double(step); };
  std::vector<CauseDiff> out;
  for (const std::string& identity : order) {
    CauseDiff c = by_identity[identity];
    const bool in_a = costs(c.cost_a, a.step_ns), in_b = costs(c.cost_b, b.step_ns);
    if (!in_a && !in_b) continue;
    const double moved = double(c.cost_b - c.cost_a);
    const double noise = std::max(kRateRelative * double(c.cost_a), kSharePoints * double(a.step_ns));
    c.status = in_a && !in_b    ? CauseStatus::Fixed
               : !in_a && in_b  ? CauseStatus::New
               : moved > noise  ? CauseStatus::Worse
               : -moved > noise ? CauseStatus::Better
                                : CauseStatus::Unchanged;
    out.push_back(std::move(c));
  }
  std::stable_sort(out.begin(), out.end(), [](const CauseDiff& x, const CauseDiff& y) {
    if (x.status != y.status) return x.status < y.status;
    return std::max(x.cost_a, x.cost_b) > std::max(y.cost_a, y.cost_b);
  });
  return out;
}

}  // namespace

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

  // Within a group, the largest change of blocked time per unit first, then the largest.
  std::stable_sort(diff.sites.begin(), diff.sites.end(), [](const SiteDiff& x, const SiteDiff& y) {
    const auto order = [](const SiteDiff& s) {
      return std::make_tuple(status_order(s.status), -std::fabs(s.b.blocked_per_unit_ns - s.a.blocked_per_unit_ns),
                             -std::max(s.a.blocked_per_unit_ns, s.b.blocked_per_unit_ns));
    };
    return order(x) < order(y);
  });
  for (const RankDiff& r : diff.ranks) {
    if (r.a.steps) diff.summary.step_ns_a = std::max(diff.summary.step_ns_a, r.a.step_ns);
    if (r.b.steps) diff.summary.step_ns_b = std::max(diff.summary.step_ns_b, r.b.step_ns);
  }
  if (a.diagnosis.step_ns > 0 && b.diagnosis.step_ns > 0) {
    diff.summary.step_ns_a = a.diagnosis.step_ns;
    diff.summary.step_ns_b = b.diagnosis.step_ns;
  }
  diff.causes = diff_causes(a.diagnosis, b.diagnosis);
  for (const CauseDiff& c : diff.causes) {
    if (c.status == CauseStatus::Fixed) ++diff.summary.causes_fixed;
    else if (c.status == CauseStatus::New) ++diff.summary.causes_new;
    else if (c.status == CauseStatus::Worse) ++diff.summary.causes_worse;
    else if (c.status == CauseStatus::Better) ++diff.summary.causes_better;
  }

  for (const SiteDiff& s : diff.sites) {
    if (s.status == SiteStatus::Appeared) ++diff.summary.appeared;
    else if (s.status == SiteStatus::Disappeared) ++diff.summary.disappeared;
    else if (is_worse(s.status)) ++diff.summary.worse;
    else if (is_better(s.status)) ++diff.summary.better;
    else ++diff.summary.unchanged;
  }
  return diff;
}

}  // namespace trainshim::cli
