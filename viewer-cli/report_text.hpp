#pragma once
// The report as text for a terminal: per rank, its tables and sync sites, then the collective
// waits, the totals of all ranks and the findings.
#include <string>

#include "report_model.hpp"

namespace trainshim::cli {

std::string render_text(const Report& report);

}  // namespace trainshim::cli
