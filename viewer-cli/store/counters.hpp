#pragma once
// The loss, untimed, GPU and sampler counters of counters.def as the CLI reads, sums and shows them.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "store/run_database.hpp"
#include "text/format.hpp"
#include "trainshim/counters.hpp"

namespace trainshim::cli {

// A process's (or a run's) TS_LOST counters.
struct LostEvents {
#define TS_LOST(column, json_key, words, meaning) int64_t column = 0;
#include "trainshim/counters.def"

  int64_t total() const {
    return 0
#define TS_LOST(column, json_key, words, meaning) +column
#include "trainshim/counters.def"
        ;
  }
  LostEvents& operator+=(const LostEvents& other) {
#define TS_LOST(column, json_key, words, meaning) column += other.column;
#include "trainshim/counters.def"
    return *this;
  }
};

inline constexpr int kLostCounters = 0
#define TS_LOST(column, json_key, words, meaning) +1
#include "trainshim/counters.def"
    ;

// The `processes` columns of one kind's counters, for a SELECT, in the order read_lost and
// read_untimed read them.
inline std::string counter_columns(CounterKind kind) {
  std::string columns;
  for (const CounterInfo& c : kCounters)
    if (c.kind == kind) (columns += columns.empty() ? "" : ", ") += c.column;
  return columns;
}

// The counters from `row`, counter_columns(CounterKind::Lost) starting at column `first`.
inline LostEvents read_lost(const Statement& row, int first) {
  LostEvents lost;
#define TS_LOST(column, json_key, words, meaning) lost.column = row.integer(first++);
#include "trainshim/counters.def"
  return lost;
}

// The report's `lost` object and the trace's "dropped events" counter.
inline nlohmann::ordered_json lost_json(const LostEvents& lost) {
  return {
#define TS_LOST(column, json_key, words, meaning) {json_key, lost.column},
#include "trainshim/counters.def"
  };
}

// "5 ring full, 1 before recording started, ...": every counter, for the dropped-events finding.
inline std::string lost_words(const LostEvents& lost) {
  std::string words;
#define TS_LOST(column, json_key, words_of, meaning) \
  (words += words.empty() ? "" : ", ") += with_thousands(lost.column) + " " + words_of;
#include "trainshim/counters.def"
  return words;
}

// A process's (or a run's) TS_UNTIMED counters.
struct UntimedCollectives {
#define TS_UNTIMED(column, json_key, words, meaning) int64_t column = 0;
#include "trainshim/counters.def"

  int64_t total() const {
    return 0
#define TS_UNTIMED(column, json_key, words, meaning) +column
#include "trainshim/counters.def"
        ;
  }
  UntimedCollectives& operator+=(const UntimedCollectives& other) {
#define TS_UNTIMED(column, json_key, words, meaning) column += other.column;
#include "trainshim/counters.def"
    return *this;
  }
};

// The counters from `row`, counter_columns(CounterKind::Untimed) starting at column `first`.
inline UntimedCollectives read_untimed(const Statement& row, int first) {
  UntimedCollectives untimed;
#define TS_UNTIMED(column, json_key, words, meaning) untimed.column = row.integer(first++);
#include "trainshim/counters.def"
  return untimed;
}

// The report's `collective_waits.untimed` (before what only the waits know) and the trace's
// "untimed collectives" counter.
inline nlohmann::ordered_json untimed_json(const UntimedCollectives& untimed) {
  return {
#define TS_UNTIMED(column, json_key, words, meaning) {json_key, untimed.column},
#include "trainshim/counters.def"
  };
}

// "  3 collectives were not timed: no timing event was free\n", a line per counter that is not 0.
inline std::string untimed_lines(const UntimedCollectives& untimed) {
  std::string lines;
#define TS_UNTIMED(column, json_key, words, meaning) \
  if (untimed.column)                                \
    lines += fmt::format("  {} collectives were not timed: {}\n", with_thousands(untimed.column), words);
#include "trainshim/counters.def"
  return lines;
}

// A process's TS_GPU counters: the GPU timeline's records CUPTI dropped or the collector did not keep.
struct GpuRecordCounters {
#define TS_GPU(column, json_key, words, meaning) int64_t column = 0;
#include "trainshim/counters.def"
};

inline constexpr int kGpuCounters = 0
#define TS_GPU(column, json_key, words, meaning) +1
#include "trainshim/counters.def"
    ;

// The counters from `row`, counter_columns(CounterKind::Gpu) starting at column `first`.
inline GpuRecordCounters read_gpu_counters(const Statement& row, int first) {
  GpuRecordCounters gpu;
#define TS_GPU(column, json_key, words, meaning) gpu.column = row.integer(first++);
#include "trainshim/counters.def"
  return gpu;
}

// Their keys in the report's `gpu` object.
inline void add_gpu_counters_json(nlohmann::ordered_json& object, const GpuRecordCounters& gpu) {
#define TS_GPU(column, json_key, words, meaning) object[json_key] = gpu.column;
#include "trainshim/counters.def"
}

// "  GPU timeline records: 12 dropped by CUPTI (its buffers were full)\n" when any is not 0.
inline std::string gpu_counter_line(const GpuRecordCounters& gpu) {
  std::string words;
#define TS_GPU(column, json_key, words_of, meaning) \
  if (gpu.column) (words += words.empty() ? "" : ", ") += with_thousands(gpu.column) + " " + words_of;
#include "trainshim/counters.def"
  return words.empty() ? words : "  GPU timeline records: " + words + "\n";
}

// A process's TS_SAMPLER counters: the sampler's samples that are not rows of `samples`.
struct SamplerCounters {
#define TS_SAMPLER(column, json_key, words, meaning) int64_t column = 0;
#include "trainshim/counters.def"
};

// The counters from `row`, counter_columns(CounterKind::Sampler) starting at column `first`.
inline SamplerCounters read_sampler_counters(const Statement& row, int first) {
  SamplerCounters sampler;
#define TS_SAMPLER(column, json_key, words, meaning) sampler.column = row.integer(first++);
#include "trainshim/counters.def"
  return sampler;
}

// Their keys in the report's `host` object.
inline void add_sampler_counters_json(nlohmann::ordered_json& object, const SamplerCounters& sampler) {
#define TS_SAMPLER(column, json_key, words, meaning) object[json_key] = sampler.column;
#include "trainshim/counters.def"
}

// "12 torn (the thread's frames changed while read)", the counters that are not 0; empty if none.
inline std::string sampler_counter_words(const SamplerCounters& sampler) {
  std::string words;
#define TS_SAMPLER(column, json_key, words_of, meaning) \
  if (sampler.column) (words += words.empty() ? "" : ", ") += with_thousands(sampler.column) + " " + words_of;
#include "trainshim/counters.def"
  return words;
}

}  // namespace trainshim::cli
