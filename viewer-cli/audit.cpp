#include "audit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <toml++/toml.h>

#include "format.hpp"
#include "output_text.hpp"

namespace trainshim::cli {

namespace {

constexpr const char* kBaselineFormat = "trainshim-baseline/1";

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string where(const SyncSite& s) {
  return fmt::format("{}:{} in {}", s.file.empty() ? "?" : s.file, s.line, s.function.empty() ? "?" : s.function);
}

bool allowed(const SyncSite& s, const Policy& policy) {
  for (const AllowedSite& a : policy.allow) {
    const auto colon = a.site.rfind(':');
    if (colon == std::string::npos) {
      if (s.function == a.site) return true;
      continue;
    }
    const std::string file = a.site.substr(0, colon);
    const std::string line = a.site.substr(colon + 1);
    if ((s.file == file || ends_with(s.file, "/" + file)) && line == std::to_string(s.line)) return true;
  }
  return false;
}

// Per step when the run's steps are known, else per run.
double per_step(double value, const RankSyncs& rs) { return rs.steps.count ? value / double(rs.steps.count) : value; }

const char* unit(const RankSyncs& rs) { return rs.steps.count ? "per step" : "in the run (no steps found)"; }

// A D2H copy into pageable memory is a sync, judged with the sync sites; the pageable sites of the
// baseline rules are the uploads.
bool counts_as(const SyncSite& s) {
  return s.kind != SiteKind::PageableCopy || s.copy_direction == Direction::HostToDevice;
}

std::string who(const ProcessReport& p) {
  return p.rank >= 0 ? fmt::format("rank {}", p.rank) : fmt::format("process {}", p.pid);
}

int64_t rank_waited(const Report& report, int rank) {
  for (const RankWaits& w : report.waits.analysis.ranks)
    if (w.rank == rank) return w.waited_ns;
  return 0;
}

template <class T>
T get_or(const toml::table& table, const char* key, T fallback, const std::string& path) {
  const toml::node* node = table.get(key);
  if (!node) return fallback;
  if (auto value = node->value<T>()) return *value;
  throw UsageError(fmt::format("{}: '{}' must be a number", path, key));
}

}  // namespace

bool AuditResult::passed() const {
  for (const auto& r : rules)
    if (!r.violations.empty()) return false;
  return true;
}

Policy load_policy(const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw UsageError(fmt::format("{}:{}:{}: cannot read the policy: {}", path, where.line, where.column,
                                 std::string(e.description())));
  }
  Policy p;
  if (const toml::table* limits = doc["limits"].as_table()) {
    p.hidden_syncs_per_step = get_or(*limits, "hidden_syncs_per_step", p.hidden_syncs_per_step, path);
    p.blocked_share = get_or(*limits, "blocked_share", p.blocked_share, path);
    p.pageable_bytes_per_step = get_or(*limits, "pageable_bytes_per_step", p.pageable_bytes_per_step, path);
    p.wait_share = get_or(*limits, "wait_share", p.wait_share, path);
    p.dropped_events = get_or<int64_t>(*limits, "dropped_events", p.dropped_events, path);
  }
  if (const toml::table* baseline = doc["baseline"].as_table()) {
    p.calls_per_step_tolerance = get_or(*baseline, "calls_per_step_tolerance", p.calls_per_step_tolerance, path);
    p.wait_tolerance = get_or(*baseline, "wait_tolerance", p.wait_tolerance, path);
  }
  if (const toml::array* allow = doc["allow"].as_array()) {
    for (const toml::node& entry : *allow) {
      const toml::table* t = entry.as_table();
      const auto site = t ? t->get_as<std::string>("site") : nullptr;
      const auto reason = t ? t->get_as<std::string>("reason") : nullptr;
      if (!site || !reason)
        throw UsageError(fmt::format("{}: every [[allow]] entry needs site = \"file:line\" or a function name, "
                                     "and reason = \"...\"", path));
      p.allow.push_back({site->get(), reason->get()});
    }
  }
  return p;
}

nlohmann::ordered_json baseline_of(const Report& report) {
  // Each site once, at its highest rate over the ranks.
  std::map<std::string, nlohmann::ordered_json> sites;
  for (const ProcessReport& p : report.processes) {
    const RankSyncs& rs = p.sync_sites;
    auto add = [&](const std::vector<SyncSite>& list, const char* kind) {
      for (const SyncSite& s : list) {
        if (!counts_as(s)) continue;
        const double rate = per_step(double(s.calls), rs);
        auto [it, fresh] = sites.try_emplace(std::string(kind) + "|" + site_identity(s));
        if (!fresh && it->second["calls_per_step"].get<double>() >= rate) continue;
        it->second = {{"identity", site_identity(s)}, {"kind", kind},         {"operation", s.classification.operation},
                      {"file", s.file},               {"line", s.line},       {"function", s.function},
                      {"source", s.source},           {"calls_per_step", rate}};
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
          {{"rank", p.rank}, {"wait_per_step_ns", per_step(double(rank_waited(report, p.rank)), p.sync_sites)}});
  return doc;
}

AuditResult audit(const Report& report, const Policy& policy, const nlohmann::json* baseline) {
  AuditResult result;
  result.database = report.database;
  RuleResult hidden{"hidden_syncs_per_step", fmt::format("hidden syncs per step per rank <= {}", policy.hidden_syncs_per_step), {}};
  RuleResult blocked{"blocked_share", fmt::format("time blocked in hidden syncs <= {:.1f} % of the run", 100 * policy.blocked_share), {}};
  RuleResult pageable{"pageable_bytes_per_step", fmt::format("pageable copies per step per rank <= {}",
                                                             human_bytes(int64_t(policy.pageable_bytes_per_step))), {}};
  RuleResult waits{"wait_share", fmt::format("collective wait <= {:.1f} % of the run per rank", 100 * policy.wait_share), {}};
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
    if (per_step(calls, rs) > policy.hidden_syncs_per_step)
      hidden.violations.push_back({hidden.rule, p.rank, top,
                                   fmt::format("{}: {:.1f} hidden syncs {}, limit {} (largest: {})", who(p),
                                               per_step(calls, rs), unit(rs), policy.hidden_syncs_per_step, top)});
    if (rs.span_ns > 0 && blocked_ns / double(rs.span_ns) > policy.blocked_share)
      blocked.violations.push_back({blocked.rule, p.rank, top,
                                    fmt::format("{}: blocked in hidden syncs {:.1f} % of the run, limit {:.1f} % "
                                                "(largest: {})", who(p), 100 * blocked_ns / double(rs.span_ns),
                                                100 * policy.blocked_share, top)});
    if (per_step(bytes, rs) > policy.pageable_bytes_per_step)
      pageable.violations.push_back({pageable.rule, p.rank,
                                     rs.pageable_copies.empty() ? "" : where(rs.pageable_copies.front()),
                                     fmt::format("{}: {} copied through pageable memory {}, limit {}", who(p),
                                                 human_bytes(int64_t(per_step(bytes, rs))), unit(rs),
                                                 human_bytes(int64_t(policy.pageable_bytes_per_step)))});
    const double waited = double(rank_waited(report, p.rank));
    if (rs.span_ns > 0 && waited / double(rs.span_ns) > policy.wait_share)
      waits.violations.push_back({waits.rule, p.rank, "",
                                  fmt::format("{}: waited in collectives {:.1f} % of the run, limit {:.1f} %", who(p),
                                              100 * waited / double(rs.span_ns), 100 * policy.wait_share)});
    if (p.lost.total() > policy.dropped_events)
      dropped.violations.push_back({dropped.rule, p.rank, "",
                                    fmt::format("{}: {} records lost, limit {} ({})", who(p), p.lost.total(),
                                                policy.dropped_events, loss_advice(p.lost))});
  }
  // Against a baseline, only what is new or worse fails (and lost records, which make every
  // figure a lower bound); the limits judge a run on its own.
  if (!baseline) {
    result.rules = {hidden, blocked, pageable, waits, dropped};
    return result;
  }
  result.rules = {dropped};

  std::map<std::string, double> known;  // "kind|identity" -> calls per step
  for (const auto& site : baseline->at("sites"))
    known[site.at("kind").get<std::string>() + "|" + site.at("identity").get<std::string>()] =
        site.at("calls_per_step").get<double>();
  RuleResult new_syncs{"new_sync_sites", "no hidden sync site that the baseline does not have", {}};
  RuleResult new_pageable{"new_pageable_sites", "no pageable copy site that the baseline does not have", {}};
  RuleResult frequent{"more_frequent_sites", fmt::format("no site more frequent than in the baseline by over {:.0f} %",
                                                         100 * policy.calls_per_step_tolerance), {}};
  RuleResult wait_growth{"wait_growth", fmt::format("no rank's collective wait per step above the baseline by over "
                                                    "{:.0f} % (and 1 ms)", 100 * policy.wait_tolerance), {}};
  std::set<std::string> reported;  // a site new on every rank is one finding
  for (const ProcessReport& p : report.processes) {
    const RankSyncs& rs = p.sync_sites;
    auto check = [&](const std::vector<SyncSite>& list, const char* kind, RuleResult& appeared) {
      for (const SyncSite& s : list) {
        if (!counts_as(s) || (std::string(kind) == "hidden" && allowed(s, policy))) continue;
        // The baseline file holds the identity as JSON wrote it.
        const std::string key = std::string(kind) + "|" + valid_utf8(site_identity(s));
        const auto it = known.find(key);
        const double rate = per_step(double(s.calls), rs);
        if (it == known.end()) {
          if (reported.insert(key).second)
            appeared.violations.push_back({appeared.rule, p.rank, where(s),
                                           fmt::format("new {}{} at {}: {:.2f} {}",
                                                       std::string(kind) == "hidden" ? "hidden sync " : "",
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
      const double now = per_step(double(rank_waited(report, p.rank)), rs);
      if (now > before * (1 + policy.wait_tolerance) + 1e6)
        wait_growth.violations.push_back({wait_growth.rule, p.rank, "",
                                          fmt::format("{}: collective wait {} {}, baseline {}", who(p),
                                                      human_duration(int64_t(now)), unit(rs),
                                                      human_duration(int64_t(before)))});
    }
  }
  result.rules.push_back(new_syncs);
  result.rules.push_back(new_pageable);
  result.rules.push_back(frequent);
  result.rules.push_back(wait_growth);
  return result;
}

namespace {

std::size_t violation_count(const AuditResult& r) {
  std::size_t n = 0;
  for (const auto& rule : r.rules) n += rule.violations.size();
  return n;
}

}  // namespace

std::string render_audit_text(const AuditResult& result) {
  std::string out = fmt::format("trainshim audit of {}: {}\n", result.database,
                                result.passed() ? "PASSED" : fmt::format("FAILED ({} violations)", violation_count(result)));
  for (const auto& rule : result.rules) {
    out += fmt::format("  [{}] {}: {}\n", rule.violations.empty() ? "ok" : "FAIL", rule.rule, rule.description);
    for (const auto& v : rule.violations) out += fmt::format("         {}\n", v.message);
  }
  return out;
}

std::string render_audit_junit(const AuditResult& result) {
  std::size_t failures = 0;
  for (const auto& rule : result.rules) failures += rule.violations.empty() ? 0 : 1;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"trainshim audit\" tests=\"{}\" failures=\"{}\">\n", result.rules.size(), failures);
  out += fmt::format("  <testsuite name=\"trainshim audit {}\" tests=\"{}\" failures=\"{}\">\n",
                     xml_text(result.database), result.rules.size(), failures);
  for (const auto& rule : result.rules) {
    out += fmt::format("    <testcase classname=\"trainshim.audit\" name=\"{}\">\n", xml_text(rule.rule));
    if (!rule.violations.empty()) {
      std::string body;
      for (const auto& v : rule.violations) body += v.message + "\n";
      out += fmt::format("      <failure message=\"{}\">{}</failure>\n",
                         xml_text(fmt::format("{}: {} violation{}", rule.description, rule.violations.size(),
                                                rule.violations.size() == 1 ? "" : "s")),
                         xml_text(body));
    }
    out += "    </testcase>\n";
  }
  out += "  </testsuite>\n</testsuites>\n";
  return out;
}

std::string render_audit_markdown(const AuditResult& result) {
  std::string out = fmt::format("### trainshim audit: {}\n\n", result.passed()
                                                                   ? "passed"
                                                                   : fmt::format("failed ({} violations)",
                                                                                 violation_count(result)));
  out += "| rule | limit | result |\n|---|---|---|\n";
  for (const auto& rule : result.rules)
    out += fmt::format("| `{}` | {} | {} |\n", rule.rule, rule.description,
                       rule.violations.empty() ? "pass" : fmt::format("**{} violation{}**", rule.violations.size(),
                                                                      rule.violations.size() == 1 ? "" : "s"));
  for (const auto& rule : result.rules) {
    if (rule.violations.empty()) continue;
    out += fmt::format("\n**{}**\n", rule.rule);
    for (const auto& v : rule.violations) out += fmt::format("- {}\n", v.message);
  }
  return out;
}

nlohmann::ordered_json render_audit_json(const AuditResult& result) {
  nlohmann::ordered_json doc;
  doc["format"] = "trainshim-audit/1";
  doc["database"] = result.database;
  doc["passed"] = result.passed();
  doc["rules"] = nlohmann::ordered_json::array();
  for (const auto& rule : result.rules) {
    auto violations = nlohmann::ordered_json::array();
    for (const auto& v : rule.violations)
      violations.push_back({{"rank", v.rank}, {"site", v.site}, {"message", v.message}});
    doc["rules"].push_back({{"rule", rule.rule},
                            {"description", rule.description},
                            {"passed", rule.violations.empty()},
                            {"violations", violations}});
  }
  return doc;
}

}  // namespace trainshim::cli
