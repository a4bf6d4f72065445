#pragma once
// The words and numbers report, audit and diff share: how a rate, a share and a host activity are
// written, spelled in one place so that the three commands say them alike.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyse/syncs.hpp"
#include "analyse/waits.hpp"
#include "text/format.hpp"

namespace trainshim::cli {

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
