#include "render/audit_render.hpp"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "text/output_text.hpp"

namespace trainshim::cli {

namespace {

std::size_t violation_count(const AuditResult& r) {
  std::size_t n = 0;
  for (const auto& rule : r.rules) n += rule.violations.size();
  return n;
}

}  // namespace

std::string render_audit_text(const AuditResult& result) {
  std::string out =
      fmt::format("trainshim audit of {}: {}\n", result.database,
                  result.passed() ? "PASSED" : fmt::format("FAILED ({} violations)", violation_count(result)));
  for (const auto& rule : result.rules) {
    out += fmt::format("  [{}] {}: {}\n", rule.violations.empty() ? "ok" : "FAIL", rule.rule, rule.description);
    for (const auto& v : rule.violations) out += fmt::format("         {}\n", v.message);
  }
  return out;
}

// JUnit XML as the JUnit plugins and the common schemas read it (docs/formats.md, "JUnit"): one
// suite for the run, a test case per rule and rank, failed by that rank's violations of the rule;
// the run's time is the suite's, the checks take no time of their own.
std::string render_audit_junit(const AuditResult& result) {
  // A run without a process still has each rule checked: one case for the job.
  const std::vector<std::optional<int>> cases =
      result.ranks.empty() ? std::vector<std::optional<int>>{std::nullopt}
                           : std::vector<std::optional<int>>(result.ranks.begin(), result.ranks.end());
  std::string body;
  std::size_t tests = 0, failures = 0;
  for (const auto& rule : result.rules) {
    for (const std::optional<int>& rank : cases) {
      ++tests;
      const std::string name = !rank ? "job" : *rank < 0 ? "no rank" : fmt::format("rank {}", *rank);
      body += fmt::format("    <testcase classname=\"trainshim.audit.{}\" name=\"{}\" time=\"0\">\n",
                          xml_text(rule.rule), xml_text(name));
      std::string text;
      std::size_t count = 0;
      for (const auto& v : rule.violations)
        if (!rank || v.rank == *rank) text += v.message + "\n", ++count;
      if (count) {
        ++failures;
        body += fmt::format("      <failure message=\"{}\" type=\"{}\">{}</failure>\n",
                            xml_text(fmt::format("{}: {} violation{}", rule.description, count, count == 1 ? "" : "s")),
                            xml_text(rule.rule), xml_text(text));
      }
      body += "    </testcase>\n";
    }
  }
  const std::string counts = fmt::format("tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{:.3f}\"",
                                         tests, failures, result.seconds);
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" +
         fmt::format("<testsuites name=\"trainshim audit\" {}>\n", counts) +
         fmt::format("  <testsuite name=\"trainshim audit {}\" {}>\n", xml_text(result.database), counts) + body +
         "  </testsuite>\n</testsuites>\n";
}

std::string render_audit_markdown(const AuditResult& result) {
  std::string out =
      fmt::format("### trainshim audit: {}\n\n",
                  result.passed() ? "passed" : fmt::format("failed ({} violations)", violation_count(result)));
  out += "| rule | limit | result |\n|---|---|---|\n";
  for (const auto& rule : result.rules)
    out += fmt::format("| `{}` | {} | {} |\n", rule.rule, rule.description,
                       rule.violations.empty() ? "pass"
                                               : fmt::format("**{} violation{}**", rule.violations.size(),
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
