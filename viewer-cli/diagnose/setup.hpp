#pragma once
// The setup checklist every tuning guide starts with, checked against what the run recorded: the
// sampler's facts of each process (process_facts: CPU affinity, the GPU's NUMA node, the
// environment, DataLoader workers) and the report's own figures (copies, kernels, input wait).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainshim::cli {

struct ProcessReport;
struct Report;

enum class SetupItemKind {
#define TS_SETUP_ITEM(value, name, words) value,
#include "diagnose/setup_items.def"
#undef TS_SETUP_ITEM
};

struct SetupItemInfo {
  SetupItemKind item;
  std::string_view name;   // "dataloader_workers": in JSON and in its finding's kind (setup_dataloader_workers)
  std::string_view words;  // "DataLoader workers": in a finding's words
};

// Every item, in the order listed (and of the enum).
inline constexpr SetupItemInfo kSetupItems[] = {
#define TS_SETUP_ITEM(value, name, words) {SetupItemKind::value, name, words},
#include "diagnose/setup_items.def"
#undef TS_SETUP_ITEM
};

inline std::string_view setup_item_name(SetupItemKind item) { return kSetupItems[std::size_t(item)].name; }

// One item for one process.
struct SetupItem {
  int rank = -1;
  int64_t pid = 0;
  SetupItemKind item = SetupItemKind::DataloaderWorkers;
  std::string observed;     // "unknown" when the run holds no data for it
  std::string recommended;  // what to set, in words
  bool ok = true;           // an item with no data is ok: nothing is reported against it
};

// The input-wait share of step time at which the input_bound finding and the DataLoader item
// speak up.
inline constexpr double kInputBoundShare = 0.10;

// Each process whose sampler ran (or that has facts) gets every item, in report order.
std::vector<SetupItem> check_setup(const Report& report);

// The pinned_memory item of one process, whether or not its sampler ran: ok with an observation
// when its input copies (those of the training loop) come from pinned memory.
SetupItem pinned_memory(const ProcessReport& p);

// The CPUs of a kernel cpulist ("0-15,32-47"), in order; none when it is not one.
std::optional<std::vector<int>> parse_cpulist(const std::string& list);

}  // namespace trainshim::cli
