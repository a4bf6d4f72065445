#pragma once
// The whole report of a job, in the pipeline's order: the measurements and step breakdowns
// (read_report), then the diagnosis over them: the setup checklist, the findings and the root
// causes with what fixing each buys.
#include <cstdint>
#include <string>
#include <vector>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

// step_name: TRAINSHIM_STEP's value ("file:line" or a Python function), empty to detect steps.
// idle_gap_ns: the shortest GPU idle gap reported; 0: max(1 ms, 5 % of the step).
// Several databases (one per node of a job) merge into one report.
Report load_report(const std::vector<const RunDatabase*>& databases, const std::string& step_name = "",
                   int64_t idle_gap_ns = 0);
Report load_report(const RunDatabase& db, const std::string& step_name = "", int64_t idle_gap_ns = 0);

}  // namespace trainshim::cli
