#pragma once
// How many training steps a rank ran, found from the repeating structure of what it recorded.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace trainshim::cli {

// One collective call as the step detection compares it: the same API with the same bytes.
struct CollectiveCall {
  int64_t api = 0, bytes = 0;
  int64_t begin_ns = 0;  // when it was called: where a step starts, never part of what repeats
  bool operator==(const CollectiveCall& other) const { return api == other.api && bytes == other.bytes; }
};

struct StepInput {
  // Distinct sync sites, as "file:line" or a native function, and distinct lists of Python frames
  // (outermost functions included, for a step named by function): a rank makes many syncs from few
  // places, so each call refers to them by index.
  std::vector<std::string> sites;
  std::vector<std::vector<std::string>> frame_functions;
  struct Sync {
    uint32_t site, functions;
    int64_t end_ns = 0;  // when it returned: a step named by a sync starts there
  };
  std::vector<Sync> syncs;                  // in time order, one per blocking call
  std::vector<CollectiveCall> collectives;  // in time order
  int64_t span_ns = 0;                      // first event's start to last event's end

  // A sync's indices, adding the site and the list of functions the first time they are seen.
  Sync intern(const std::string& site, const std::vector<std::string>& functions);

 private:
  std::unordered_map<std::string, uint32_t> site_ids_;
  std::unordered_map<std::string, uint32_t> function_ids_;  // by the names joined with '\n'
};

struct Steps {
  int64_t count = 0;    // 0: no step found; rates are then per second
  std::string rule;     // how it was found, in words
  int64_t step_ns = 0;  // span / count
  // Where each step starts, in time order: the return of each call of the sync site that marks
  // steps, or the call of each period's first collective. Step k runs from starts_ns[k] to
  // starts_ns[k + 1]; the last one's end is not known.
  std::vector<int64_t> starts_ns;
};

// `named`: TRAINSHIM_STEP (or --step): "file:line" or a Python function name; empty: detect.
Steps find_steps(const StepInput& input, const std::string& named);

}  // namespace trainshim::cli
