#include "audit_render.hpp"

#include <fmt/format.h>

#include "output_text.hpp"

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

std::string render_audit_junit(const AuditResult& result) {
  std::size_t failures = 0;
  for (const auto& rule : result.rules) failures += rule.violations.empty() ? 0 : 1;
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"trainshim audit\" tests=\"{}\" failures=\"{}\">\n", result.rules.size(),
                     failures);
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
