#pragma once
// The report as Prometheus metrics (`trainshim metrics`): per rank its steps, waits, straggler
// score, its collectives per communicator (calls, GPU time, bandwidths), input wait, GPU busy and idle by cause, its
// top hidden-sync and pageable-copy sites, its lost records and its last progress; per job the straggler and the hangs.
// Every label value is bounded: sites beyond the top few are summed into site="other". docs/fleet.md lists them.
#include <cstddef>
#include <string>

#include "diagnose/report_model.hpp"

namespace trainshim::cli {

// Prometheus' text format 0.0.4 (node_exporter's textfile collector reads only it), or OpenMetrics
// 1.0 (what Prometheus asks a target for first).
enum class MetricsFormat { Prometheus, OpenMetrics };
// The Content-Type of each format.
const char* metrics_content_type(MetricsFormat format);

// Per rank: the sync and pageable-copy sites named (the rest summed), and the ranks named among
// those it waited for (the rest summed).
inline constexpr std::size_t kMetricsTopSites = 5;
inline constexpr std::size_t kMetricsTopWaitedFor = 3;
// Per rank: the (communicator, collective) pairs named, by GPU time (the rest summed).
inline constexpr std::size_t kMetricsTopCommunicatorOps = 8;

// `compute_seconds`: how long reading the databases took, exported as trainshim_metrics_compute_seconds.
std::string render_metrics(const Report& report, MetricsFormat format, double compute_seconds);

}  // namespace trainshim::cli
