#pragma once
// The words and numbers report, audit and diff share: how a rank, a site and a rate are written,
// spelled in one place so that the three commands say them alike.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "syncs.hpp"
#include "waits.hpp"

namespace trainshim::cli {

// "3", or "?" for a process no launcher numbered (rank -1).
std::string rank_label(int rank);
// The rank, or null for a process no launcher numbered.
nlohmann::ordered_json rank_json(int rank);
// "rank 3", or "process 1234" for a process no launcher numbered.
std::string rank_words(int rank, int64_t pid);

// "file:line in function": "?" for an unknown file, no " in ..." for an unknown function.
std::string site_location(const SyncSite& site);

// `amount` per step; empty when the run found no steps.
std::optional<double> per_step(double amount, int64_t steps);
// `amount` per second of a span; 0 when the span is unknown (0).
double per_second(double amount, int64_t span_ns);
// `ns` as a fraction of a span; 0 when the span is unknown (0).
double share_of_span(int64_t ns, int64_t span_ns);

// The value, or null when it is empty.
nlohmann::ordered_json optional_json(const std::optional<double>& value);

// The straggler's host activity, the first three: "train.py:12 in load (40 %), ...".
std::string host_activity_words(const std::vector<HostActivity>& activity);

}  // namespace trainshim::cli
