#pragma once
// A diff of two runs as a compact table and as the trainshim-diff/1 JSON document.
#include <nlohmann/json.hpp>

#include <string>

#include "diagnose/diff.hpp"

namespace trainshim::cli {

// A compact table, appeared/disappeared/worse first, then the ranks, ending with the summary line.
std::string render_diff_text(const RunDiff& diff);
// "3 sites appeared, 1 disappeared, 2 got worse" (no trailing newline).
std::string summary_line(const DiffSummary& summary);
// The trainshim-diff/1 document.
nlohmann::ordered_json render_diff_json(const RunDiff& diff);

}  // namespace trainshim::cli
