#pragma once
// The report as one self-contained HTML page (`trainshim report --format html`): inline SVG and
// CSS, no script and nothing fetched, readable opened from disk, at 1,280 px and on a phone.
#include <string>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

// Ranks whose every step is drawn (the straggler, the slowest, the most idle, rank 0 first); the
// others are one row each of percentiles. Rows and columns of the wait heat map at most.
inline constexpr std::size_t kHtmlStripRanks = 16;
inline constexpr std::size_t kHtmlBarsPerStrip = 300;
inline constexpr std::size_t kHtmlHeatRows = 32;
inline constexpr std::size_t kHtmlHeatColumns = 200;
// A strip's full height is at most this many times its 90th-percentile bar: longer bars (a first
// step that compiles, a profiler starting) are drawn cut, so that they do not flatten the rest.
inline constexpr int64_t kHtmlCutBarsAbove = 3;

std::string render_html(const Report& report);

}  // namespace trainshim::cli
