#pragma once
// The loss, untimed, GPU-timeline and sampler counters of counters.def as data, for code that goes over all of them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainshim {

enum class CounterKind : uint8_t {
  Lost,     // records that never reached the database
  Untimed,  // collectives recorded but not timed on the GPU
  Gpu,      // GPU activity records that are not rows of gpu_activities
  Sampler,  // the sampler's samples that are not rows of samples
};

struct CounterInfo {
  CounterKind kind;
  std::string_view column, json_key, words, meaning;
};

inline constexpr std::array kCounters = {
#define TS_COUNTER(kind, column, json_key, words, meaning) \
  CounterInfo{CounterKind::kind, #column, json_key, words, meaning},
#include "trainshim/counters.def"
};

}  // namespace trainshim
