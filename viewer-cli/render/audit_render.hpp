#pragma once
// An audit's result as text, JUnit XML (one test case per rule), Markdown (for a pull request) and
// the trainshim-audit/1 JSON document.
#include <nlohmann/json.hpp>

#include <string>

#include "diagnose/audit.hpp"

namespace trainshim::cli {

std::string render_audit_text(const AuditResult& result);
std::string render_audit_junit(const AuditResult& result);
std::string render_audit_markdown(const AuditResult& result);
nlohmann::ordered_json render_audit_json(const AuditResult& result);

}  // namespace trainshim::cli
