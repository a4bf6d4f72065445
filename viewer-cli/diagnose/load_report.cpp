#include "diagnose/load_report.hpp"

#include "analyse/classifier.hpp"
#include "diagnose/findings.hpp"
#include "diagnose/root_causes.hpp"
#include "diagnose/setup.hpp"

namespace trainshim::cli {

Report load_report(const std::vector<const RunDatabase*>& databases, const std::string& step_name,
                   int64_t idle_gap_ns) {
  Report report = read_report(databases, step_name, idle_gap_ns);
  report.setup = check_setup(report);
  // The advice and the checklist agree: where the input copies are pinned, a blocking upload needs
  // non_blocking=True alone.
  for (ProcessReport& p : report.processes)
    if (const SetupItem pinned = pinned_memory(p); pinned.ok && !pinned.observed.empty())
      for (SyncSite& site : p.sync_sites.hidden)
        if (site.classification.rule == "upload") site.classification.advice = kPinnedUploadAdvice;
  add_findings(report);
  report.diagnosis = diagnose(report);
  for (std::size_t i = 0; i < report.findings.size(); ++i)
    report.findings[i].severity = report.diagnosis.finding_severity[i];
  return report;
}

Report load_report(const RunDatabase& db, const std::string& step_name, int64_t idle_gap_ns) {
  return load_report({&db}, step_name, idle_gap_ns);
}

}  // namespace trainshim::cli
