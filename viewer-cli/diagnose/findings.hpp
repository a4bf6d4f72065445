#pragma once
// The report's findings: what is wrong in a run (a hang, a straggler, pageable copies, hidden
// syncs, a GPU starved of input, lost records, stripped libraries, a GPU timeline that could not be
// taken), what it costs, and the advice for each.
#include <string>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

// Fills report.findings from the rest of the report, costliest first.
void add_findings(Report& report);

// What to do about lost records, for each cause that lost some: only a full ring is helped by a
// larger one.
std::string loss_advice(const LostEvents& lost);

}  // namespace trainshim::cli
