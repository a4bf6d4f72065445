// libFuzzer harness: the CLI's reading of a run database. Input: the bytes of a SQLite file, read
// the way `trainshim report [--json]`, `audit` (every format, with and without a baseline),
// `export` and `diff` read it. An exception is how the CLI refuses a database (main prints it
// and exits non-zero); anything else (a crash, a sanitizer report, a hang) is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <sstream>
#include <string>

#include "diagnose/audit.hpp"
#include "diagnose/diff.hpp"
#include "diagnose/load_report.hpp"
#include "render/audit_render.hpp"
#include "render/diff_render.hpp"
#include "render/export.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "store/run_database.hpp"

namespace {

using namespace trainshim::cli;

std::string g_path;

void read_as_the_cli_does(const std::string& path) {
  const RunDatabase db(path);
  const Report report = load_report(db);
  (void)render_text(report);
  (void)render_json(report).dump(2);

  const nlohmann::json baseline = baseline_of(report);
  for (const nlohmann::json* against : {static_cast<const nlohmann::json*>(nullptr), &baseline}) {
    const AuditResult result = audit(report, Policy{}, against);
    (void)render_audit_text(result);
    (void)render_audit_junit(result);
    (void)render_audit_markdown(result);
    (void)render_audit_json(result).dump(2);
  }

  const RunDiff diff = diff_reports(report, report);
  (void)render_diff_text(diff);
  (void)render_diff_json(diff).dump(2);

  std::ostringstream trace;
  export_chrome_trace(db, trace);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_path = (std::filesystem::temp_directory_path() / ("trainshim-fuzz-" + std::to_string(getpid()) + ".db")).string();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::FILE* file = std::fopen(g_path.c_str(), "wb");
  if (!file || std::fwrite(data, 1, size, file) != size || std::fclose(file) != 0) abort();
  try {
    read_as_the_cli_does(g_path);
  } catch (const std::exception&) {
  }
  std::remove(g_path.c_str());
  return 0;
}
