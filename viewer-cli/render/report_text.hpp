#pragma once
// The report as text for a terminal: per rank, its tables and sync sites, then the collective
// waits, the totals of all ranks and the findings.
#include <cstddef>
#include <string>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

struct TextOptions {
  std::size_t top = 3;   // causes shown in "What to fix first"; the rest are in Findings
  bool summary = false;  // the verdict alone: the job's step, its top causes, the straggler
};

std::string render_text(const Report& report, const TextOptions& options = {});
// The report's Setup section (`trainshim report --setup` prints it alone); empty when no process was checked.
std::string render_setup_text(const Report& report);

}  // namespace trainshim::cli
