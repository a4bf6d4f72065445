#include "diagnose/audit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "diagnose/findings.hpp"
#include "diagnose/present.hpp"
#include "text/format.hpp"
#include "text/output_text.hpp"

namespace trainshim::cli {

namespace {

// "file:line in function", each part "?" when unknown: the fixed form a violation names its site
// with (CI matches it), unlike site_location's.
std::string where(const SyncSite& s) {
  return fmt::format("{}:{} in {}", s.file.empty() ? "?" : s.file, s.line, s.function.empty() ? "?" : s.function);
}

// Per step when the run's steps are known, else per run.
double per_step_else_per_run(double value, const RankSyncs& rs) {
  return per_step(value, rs.steps.count).value_or(value);
}

const char* unit(const RankSyncs& rs) { return rs.steps.count ? "per step" : "in the run (no steps found)"; }

// A D2H copy into pageable memory is a sync, judged with the sync sites; the pageable sites of the
// baseline rules are the uploads.
bool counts_as(const SyncSite& s) {
  return s.kind != SiteKind::PageableCopy || s.copy_direction == Direction::HostToDevice;
}

int64_t rank_waited(const Report& report, int rank) {
  const RankWaits* w = report.waits.analysis.waits_of(rank);
  return w ? w->waited_ns : 0;
}

// A rank's shares of its step from its step breakdown: the bubbles of its hidden syncs (allowed
// sites left out) and its waits for other ranks. Parts of one decomposition, so a sync that blocks
// while its rank waits for a straggler counts in one of them, never both.
struct StepShares {
  double hidden_sync_bubbles = 0;
  double waiting_for_ranks = 0;
  std::string largest_bubble;  // the site_location of the hidden sync with the largest bubble
};

std::optional<StepShares> step_shares(const ProcessReport& p, const Policy& policy) {
  if (!p.step_breakdown) return std::nullopt;
  std::set<std::string> hidden;
  for (const SyncSite& s : p.sync_sites.hidden)
    if (!allowed(s, policy)) hidden.insert(site_location(s));
  StepShares out;
  double largest = 0;
  for (const StepShare& part : p.step_breakdown->parts) {
    if (part.part == StepPart::Sync && hidden.count(part.site)) {
      out.hidden_sync_bubbles += part.share;
      if (part.share > largest) largest = part.share, out.largest_bubble = part.site;
    }
    if (part.part == StepPart::WaitingForStraggler || part.part == StepPart::WaitingForPeers)
      out.waiting_for_ranks += part.share;
  }
  return out;
}

}  // namespace

bool is_baseline(const nlohmann::json& document) {
  if (!document.is_object()) return false;
  const std::string format = document.value("format", "");
  return (format == kBaselineFormat || format == kWordedBaselineFormat) && document.contains("sites") &&
         document.contains("ranks");
}

bool AuditResult::passed() const {
  for (const auto& r : rules)
    if (!r.violations.empty()) return false;
  return true;
}

nlohmann::ordered_json baseline_of(const Report& report) {
  // Each site once, at its highest rate over the ranks.
  std::map<std::string, nlohmann::ordered_json> sites;
  for (const ProcessReport& p : report.processes) {
    const RankSyncs& rs = p.sync_sites;
    auto add = [&](const std::vector<SyncSite>& list, const char* kind) {
      for (const SyncSite& s : list) {
        if (!counts_as(s)) continue;
        const double rate = per_step_else_per_run(double(s.calls), rs);
        auto [it, fresh] = sites.try_emplace(std::string(kind) + "|" + site_identity(s));
        if (!fresh && it->second["calls_per_step"].get<double>() >= rate) continue;
        it->second = {{"identity", site_identity(s)},
                      {"kind", kind},
                      {"operation", s.classification.operation},
                      {"file", s.file},
                      {"line", s.line},
                      {"function", s.function},
                      {"source", s.source},
                      {"calls_per_step", rate}};
      }
    };
    add(rs.hidden, "hidden");
    add(rs.pageable_copies, "pageable");
  }
  nlohmann::ordered_json doc;
  doc["format"] = kBaselineFormat;
  doc["database"] = report.database;
  doc["sites"] = nlohmann::ordered_json::array();
  for (auto& [key, site] : sites) doc["sites"].push_back(site);
  doc["ranks"] = nlohmann::ordered_json::array();
  for (const ProcessReport& p : report.processes)
    if (p.rank >= 0)
      doc["ranks"].push_back(
          {{"rank", p.rank},
           {"wait_per_step_ns", per_step_else_per_run(double(rank_waited(report, p.rank)), p.sync_sites)}});
  return doc;
}

// Whether a root cause is a sync the policy allows: one of its sites ("operation at location") is.
bool allowed_cause(const RootCause& cause, const Report& report, const Policy& policy) {
  if (cause.kind != CauseKind::HiddenSync) return false;
  for (const ProcessReport& p : report.processes)
    for (const SyncSite& s : p.sync_sites.hidden)
      if (site_location(s) == cause.site && s.classification.operation == cause.operation && allowed(s, policy))
        return true;
  return false;
}

// The root causes that cost the job's step more than the policy's share, once on each rank they
// lengthen: parts of the step that never overlap.
RuleResult costly_causes(const Report& report, const Policy& policy) {
  RuleResult rule{
      "cause_share", fmt::format("no root cause costs over {:.1f} % of the job's step", 100 * policy.cause_share), {}};
  const Diagnosis& d = report.diagnosis;
  for (const RootCause& c : d.causes) {
    if (c.predicted_step_ns <= 0 || c.share <= policy.cause_share || allowed_cause(c, report, policy)) continue;
    const std::string message =
        fmt::format("{}: {} per step, {:.1f} % of the {} step, limit {:.1f} %; fixed, the step would be about {}",
                    c.title, human_duration(c.cost_ns_per_step), 100 * c.share, human_duration(d.step_ns),
                    100 * policy.cause_share, human_duration(c.predicted_step_ns));
    for (const int rank : c.ranks.empty() ? std::vector<int>{c.rank} : c.ranks)
      rule.violations.push_back(
          {rule.rule, rank, "", rank >= 0 ? fmt::format("rank {}'s step: {}", rank, message) : message});
  }
  return rule;
}

AuditResult audit(const Report& report, const Policy& policy, const nlohmann::json* baseline) {
  AuditResult result;
  result.database = report.database;
  for (const ProcessReport& p : report.processes) result.ranks.push_back(p.rank);
  std::sort(result.ranks.begin(), result.ranks.end());
  result.ranks.erase(std::unique(result.ranks.begin(), result.ranks.end()), result.ranks.end());
  RuleResult hidden{
      "hidden_syncs_per_step", fmt::format("hidden syncs per step per rank <= {}", policy.hidden_syncs_per_step), {}};
  RuleResult blocked{"blocked_share",
                     fmt::format("GPU idle after hidden syncs <= {:.1f} % of the step per rank (without steps: "
                                 "time blocked in them, of the run)",
                                 100 * policy.blocked_share),
                     {}};
  RuleResult pageable{
      "pageable_bytes_per_step",
      fmt::format("pageable copies per step per rank <= {}", human_bytes(int64_t(policy.pageable_bytes_per_step))),
      {}};
  RuleResult waits{"wait_share",
                   fmt::format("waiting for other ranks <= {:.1f} % of the step per rank (without steps: "
                               "collective wait, of the run)",
                               100 * policy.wait_share),
                   {}};
  RuleResult dropped{"dropped_events", fmt::format("lost records per rank <= {}", policy.dropped_events), {}};

  for (const ProcessReport& p : report.processes) {
    const RankSyncs& rs = p.sync_sites;
    double calls = 0, blocked_ns = 0, bytes = 0;
    std::string top;
    for (const SyncSite& s : rs.hidden) {
      if (allowed(s, policy)) continue;
      calls += double(s.calls);
      blocked_ns += double(s.blocked_ns);
      if (top.empty()) top = fmt::format("{} at {}", s.classification.operation, where(s));
    }
    for (const SyncSite& s : rs.pageable_copies) bytes += double(s.bytes);
    if (per_step_else_per_run(calls, rs) > policy.hidden_syncs_per_step)
      hidden.violations.push_back(
          {hidden.rule, p.rank, top,
           fmt::format("{}: {:.1f} hidden syncs {}, limit {} (largest: {})", rank_words(p.rank, p.pid),
                       per_step_else_per_run(calls, rs), unit(rs), policy.hidden_syncs_per_step, top)});
    const std::optional<StepShares> shares = step_shares(p, policy);
    if (shares && shares->hidden_sync_bubbles > policy.blocked_share) {
      std::string largest = top;
      for (const SyncSite& s : rs.hidden)
        if (!allowed(s, policy) && site_location(s) == shares->largest_bubble) {
          largest = fmt::format("{} at {}", s.classification.operation, where(s));
          break;
        }
      blocked.violations.push_back({blocked.rule, p.rank, largest,
                                    fmt::format("{}: the GPU idle after hidden syncs {:.1f} % of the step, limit "
                                                "{:.1f} % (largest: {})",
                                                rank_words(p.rank, p.pid), 100 * shares->hidden_sync_bubbles,
                                                100 * policy.blocked_share, largest)});
    }
    if (!shares && rs.span_ns > 0 && blocked_ns / double(rs.span_ns) > policy.blocked_share)
      blocked.violations.push_back({blocked.rule, p.rank, top,
                                    fmt::format("{}: blocked in hidden syncs {:.1f} % of the run, limit {:.1f} % "
                                                "(largest: {})",
                                                rank_words(p.rank, p.pid), 100 * blocked_ns / double(rs.span_ns),
                                                100 * policy.blocked_share, top)});
    if (per_step_else_per_run(bytes, rs) > policy.pageable_bytes_per_step)
      pageable.violations.push_back(
          {pageable.rule, p.rank, rs.pageable_copies.empty() ? "" : where(rs.pageable_copies.front()),
           fmt::format("{}: {} copied through pageable memory {}, limit {}", rank_words(p.rank, p.pid),
                       human_bytes(int64_t(per_step_else_per_run(bytes, rs))), unit(rs),
                       human_bytes(int64_t(policy.pageable_bytes_per_step)))});
    const double waited = double(rank_waited(report, p.rank));
    if (shares && shares->waiting_for_ranks > policy.wait_share)
      waits.violations.push_back(
          {waits.rule, p.rank, "",
           fmt::format("{}: waiting for other ranks {:.1f} % of the step, limit {:.1f} %", rank_words(p.rank, p.pid),
                       100 * shares->waiting_for_ranks, 100 * policy.wait_share)});
    if (!shares && rs.span_ns > 0 && waited / double(rs.span_ns) > policy.wait_share)
      waits.violations.push_back(
          {waits.rule, p.rank, "",
           fmt::format("{}: waited in collectives {:.1f} % of the run, limit {:.1f} %", rank_words(p.rank, p.pid),
                       100 * waited / double(rs.span_ns), 100 * policy.wait_share)});
    if (p.lost.total() > policy.dropped_events)
      dropped.violations.push_back({dropped.rule, p.rank, "",
                                    fmt::format("{}: {} records lost, limit {} ({})", rank_words(p.rank, p.pid),
                                                p.lost.total(), policy.dropped_events, loss_advice(p.lost))});
  }
  // Against a baseline, what is new or worse fails, lost records (which make every figure a lower
  // bound), and the limits the policy file sets; the default limits judge a run on its own.
  RuleResult causes = costly_causes(report, policy);
  if (!baseline) {
    result.rules = {causes, hidden, blocked, pageable, waits, dropped};
    return result;
  }
  for (const RuleResult* limit : {&causes, &hidden, &blocked, &pageable, &waits})
    if (policy.limits_set.count(limit->rule)) result.rules.push_back(*limit);
  result.rules.push_back(dropped);

  std::map<std::string, double> known;  // "kind|identity" -> calls per step
  for (const auto& site : baseline->at("sites"))
    known[site.at("kind").get<std::string>() + "|" + site.at("identity").get<std::string>()] =
        site.at("calls_per_step").get<double>();
  RuleResult new_syncs{"new_sync_sites", "no hidden sync site that the baseline does not have", {}};
  RuleResult new_pageable{"new_pageable_sites", "no pageable copy site that the baseline does not have", {}};
  RuleResult frequent{
      "more_frequent_sites",
      fmt::format("no site more frequent than in the baseline by over {:.0f} %", 100 * policy.calls_per_step_tolerance),
      {}};
  RuleResult wait_growth{"wait_growth",
                         fmt::format("no rank's collective wait per step above the baseline by over "
                                     "{:.0f} % (and 1 ms)",
                                     100 * policy.wait_tolerance),
                         {}};
  const bool worded = baseline->at("format") == kWordedBaselineFormat;
  std::set<std::string> reported;  // a site new on every rank is one finding
  for (const ProcessReport& p : report.processes) {
    const RankSyncs& rs = p.sync_sites;
    auto check = [&](const std::vector<SyncSite>& list, const char* kind, RuleResult& appeared) {
      for (const SyncSite& s : list) {
        if (!counts_as(s) || (std::string(kind) == "hidden" && allowed(s, policy))) continue;
        // The baseline file holds the identity as JSON wrote it.
        const std::string key =
            std::string(kind) + "|" + valid_utf8(worded ? worded_site_identity(s) : site_identity(s));
        const auto it = known.find(key);
        const double rate = per_step_else_per_run(double(s.calls), rs);
        if (it == known.end()) {
          if (reported.insert(key).second)
            appeared.violations.push_back(
                {appeared.rule, p.rank, where(s),
                 fmt::format("new {}{} at {}: {:.2f} {}", std::string(kind) == "hidden" ? "hidden sync " : "",
                             s.classification.operation, where(s), rate, unit(rs))});
        } else if (rate > it->second * (1 + policy.calls_per_step_tolerance) + 0.05 && reported.insert(key).second) {
          frequent.violations.push_back({frequent.rule, p.rank, where(s),
                                         fmt::format("{} at {}: {:.2f} {}, baseline {:.2f}", s.classification.operation,
                                                     where(s), rate, unit(rs), it->second)});
        }
      }
    };
    check(rs.hidden, "hidden", new_syncs);
    check(rs.pageable_copies, "pageable", new_pageable);
    for (const auto& r : baseline->at("ranks")) {
      if (r.at("rank") != p.rank) continue;
      const double before = r.at("wait_per_step_ns").get<double>();
      const double now = per_step_else_per_run(double(rank_waited(report, p.rank)), rs);
      if (now > before * (1 + policy.wait_tolerance) + 1e6)
        wait_growth.violations.push_back(
            {wait_growth.rule, p.rank, "",
             fmt::format("{}: collective wait {} {}, baseline {}", rank_words(p.rank, p.pid),
                         human_duration(int64_t(now)), unit(rs), human_duration(int64_t(before)))});
    }
  }
  result.rules.push_back(new_syncs);
  result.rules.push_back(new_pageable);
  result.rules.push_back(frequent);
  result.rules.push_back(wait_growth);
  return result;
}

}  // namespace trainshim::cli
