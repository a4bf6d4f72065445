#include "render/diff_render.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "diagnose/present.hpp"
#include "text/format.hpp"
#include "text/text_layout.hpp"

namespace trainshim::cli {

namespace {

std::string rate_text(const SiteSide& side, RateUnit unit, double rate) {
  if (!side.present) return "-";
  return unit == RateUnit::Step ? fmt::format("{:.2f}", rate) : fmt::format("{:.2f}/s", rate);
}

std::string share_text(const SiteSide& side) {
  return side.present ? fmt::format("{:.1f} %", 100 * side.share) : std::string("-");
}

std::string blocked_text(const SiteSide& side, RateUnit unit) {
  if (!side.present) return "-";
  return human_duration(std::llround(side.blocked_per_unit_ns)) + (unit == RateUnit::Second ? "/s" : "");
}

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

nlohmann::ordered_json site_side_json(const SiteSide& s) {
  if (!s.present) return nullptr;
  return {{"line", s.line},
          {"calls", s.calls},
          {"per_step", optional_json(s.per_step)},
          {"per_second", s.per_second},
          {"blocked_ns", s.blocked_ns},
          {"blocked_per_unit_ns", s.blocked_per_unit_ns},
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

// "51.9 ms -> 30.5 ms (-41.2 %, faster)"; a run without steps has "not found".
std::string step_change_text(const DiffSummary& s) {
  if (!s.step_ns_a || !s.step_ns_b)
    return fmt::format("{} -> {}", s.step_ns_a ? human_duration(s.step_ns_a) : "not found",
                       s.step_ns_b ? human_duration(s.step_ns_b) : "not found");
  const double change = double(s.step_ns_b - s.step_ns_a) / double(s.step_ns_a);
  const char* verdict = change < -kRateRelative ? ", faster" : change > kRateRelative ? ", slower" : "";
  return fmt::format("{} -> {} ({:+.1f} %{})", human_duration(s.step_ns_a), human_duration(s.step_ns_b), 100 * change,
                     verdict);
}

std::string summary_line(const DiffSummary& s) {
  const std::string sites = fmt::format("{} site{} appeared, {} disappeared, {} got worse", s.appeared,
                                        s.appeared == 1 ? "" : "s", s.disappeared, s.worse);
  const std::string causes = s.causes_fixed || s.causes_new || s.causes_worse || s.causes_better
                                 ? fmt::format("causes: {} fixed, {} new, {} worse, {} better; ", s.causes_fixed,
                                               s.causes_new, s.causes_worse, s.causes_better)
                                 : "";
  return (s.step_ns_a || s.step_ns_b ? "step " + step_change_text(s) + "; " : "") + causes + sites;
}

std::string cost_text(int64_t ns) { return ns > 0 ? human_duration(ns) : "-"; }

constexpr std::size_t kOperationWidth = 48;

std::string render_diff_text(const RunDiff& diff) {
  std::string out = fmt::format("trainshim diff: A = job {} ({})\n                B = job {} ({})\n", diff.job_a,
                                diff.database_a, diff.job_b, diff.database_b);
  if (diff.summary.step_ns_a || diff.summary.step_ns_b)
    out += fmt::format("\nStep (the slowest rank's): {}\n", step_change_text(diff.summary));
  if (!diff.causes.empty()) {
    out += "\nRoot causes: what each costs the job's step, A and B\n";
    for (const CauseDiff& c : diff.causes)
      out += fmt::format("  {:<10}{:>10}{:>10}  {}\n", status_name(c.status), cost_text(c.cost_a), cost_text(c.cost_b),
                         c.title);
  }

  out += "\nSync sites: calls per step (/s: per second, a run without steps), share of step time, blocked per step\n";
  // The operation column as wide as its longest name, up to kOperationWidth (longer ones cut with "…").
  std::size_t operation_width = std::string_view("operation").size();
  for (const SiteDiff& s : diff.sites) operation_width = std::max(operation_width, display_width(s.operation));
  operation_width = std::min(operation_width, kOperationWidth) + 1;
  if (diff.sites.empty()) out += "  no sync sites in either run\n";
  else
    out += fmt::format("  {:<14}{:<5}{:<9}{:<{}}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10}\n", "status", "rank", "kind",
                       "operation", operation_width, "calls A", "B", "share A", "B", "blocked A", "B");
  for (const SiteDiff& s : diff.sites) {
    out += fmt::format("  {:<14}{:<5}{:<9}{:<{}}{:>9}{:>9}{:>9}{:>9}{:>10}{:>10}\n", status_name(s.status),
                       rank_label(s.rank), s.kind == SyncKind::Hidden ? "hidden" : "explicit",
                       cut_to_width(s.operation, kOperationWidth), operation_width, rate_text(s.a, s.unit, s.rate_a),
                       rate_text(s.b, s.unit, s.rate_b), share_text(s.a), share_text(s.b), blocked_text(s.a, s.unit),
                       blocked_text(s.b, s.unit));
    out += fmt::format("      at {}\n", location_text(s));
  }

  if (!diff.ranks.empty()) {
    out += "\nRanks: step time, collective wait and pageable bytes per step (/s: per second), last to arrive\n";
    out += fmt::format("  {:<6}{:>10}{:>10}{:>11}{:>11}{:>8}{:>8}{:>12}{:>12}\n", "rank", "step A", "B", "wait A", "B",
                       "last A", "B", "pageable A", "B");
    for (const RankDiff& r : diff.ranks) {
      const std::string notes = rank_notes(r);
      out +=
          fmt::format("  {:<6}{:>10}{:>10}{:>11}{:>11}{:>8}{:>8}{:>12}{:>12}{}\n", rank_label(r.rank), step_text(r.a),
                      step_text(r.b), wait_text(r.a, r.unit, r.wait_a), wait_text(r.b, r.unit, r.wait_b),
                      last_text(r.a), last_text(r.b), pageable_text(r.a, r.unit, r.pageable_a),
                      pageable_text(r.b, r.unit, r.pageable_b), notes.empty() ? "" : "   <- " + notes);
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
  doc["causes"] = nlohmann::ordered_json::array();
  for (const CauseDiff& c : diff.causes)
    doc["causes"].push_back({{"status", status_name(c.status)},
                             {"identity", c.identity},
                             {"title", c.title},
                             {"cost_ns_per_step_a", c.cost_a},
                             {"cost_ns_per_step_b", c.cost_b}});
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
                    {"step_ns_a", diff.summary.step_ns_a},
                    {"step_ns_b", diff.summary.step_ns_b},
                    {"causes_fixed", diff.summary.causes_fixed},
                    {"causes_new", diff.summary.causes_new},
                    {"causes_worse", diff.summary.causes_worse},
                    {"causes_better", diff.summary.causes_better},
                    {"line", summary_line(diff.summary)}};
  return doc;
}

}  // namespace trainshim::cli
