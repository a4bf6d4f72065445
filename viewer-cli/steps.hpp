#pragma once
// How many training steps a rank ran, found from the repeating structure of what it recorded.
#include <cstdint>
#include <string>
#include <vector>

namespace trainshim::cli {

struct StepInput {
  // Sync sites in time order (one entry per blocking call), as "file:line" or a native function.
  std::vector<std::string> sync_sites;
  // Every site's Python frames (outermost functions included), aligned with sync_sites, for a
  // step named by function.
  std::vector<std::vector<std::string>> sync_functions;
  // Collectives in time order, as "op/bytes".
  std::vector<std::string> collectives;
  int64_t span_ns = 0;  // first event's start to last event's end
};

struct Steps {
  int64_t count = 0;      // 0: no step found; rates are then per second
  std::string rule;       // how it was found, in words
  int64_t step_ns = 0;    // span / count
};

// `named`: TRAINSHIM_STEP (or --step): "file:line" or a Python function name; empty: detect.
Steps find_steps(const StepInput& input, const std::string& named);

}  // namespace trainshim::cli
