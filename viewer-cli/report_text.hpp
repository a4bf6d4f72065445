#pragma once
// The report as text for a terminal: per rank, its tables and sync sites, then the collective
// waits, the totals of all ranks and the findings.
#include <string>

#include "report_model.hpp"

namespace trainshim::cli {

std::string render_text(const Report& report);
// The report's Setup section (`trainshim report --setup` prints it alone); empty when no process was checked.
std::string render_setup_text(const Report& report);

}  // namespace trainshim::cli
