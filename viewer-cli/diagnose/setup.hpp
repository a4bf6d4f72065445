#pragma once
// The setup checklist every tuning guide starts with, checked against what the run recorded: the
// sampler's facts of each process (process_facts: CPU affinity, the GPU's NUMA node, the
// environment, DataLoader workers) and the report's own figures (copies, kernels, input wait).
#include <optional>
#include <string>
#include <vector>

namespace trainshim::cli {

struct ProcessReport;
struct Report;

// One item for one process.
struct SetupItem {
  int rank = -1;
  int64_t pid = 0;
  std::string item;         // dataloader_workers, pinned_memory, numa_affinity, omp_threads, nccl_env, ranks_per_node,
                            // mixed_precision
  std::string observed;     // "unknown" when the run holds no data for it
  std::string recommended;  // what to set, in words
  bool ok = true;           // an item with no data is ok: nothing is reported against it
};

// The items in the order listed; each process whose sampler ran (or that has facts) gets all of
// them, in report order.
inline constexpr const char* kSetupItems[] = {"dataloader_workers", "pinned_memory",  "numa_affinity",  "omp_threads",
                                              "nccl_env",           "ranks_per_node", "mixed_precision"};

// The input-wait share of step time at which the input_bound finding and the DataLoader item
// speak up.
inline constexpr double kInputBoundShare = 0.10;

std::vector<SetupItem> check_setup(const Report& report);

// The pinned_memory item of one process, whether or not its sampler ran: ok with an observation
// when its input copies (those of the training loop) come from pinned memory.
SetupItem pinned_memory(const ProcessReport& p);

// The CPUs of a kernel cpulist ("0-15,32-47"), in order; none when it is not one.
std::optional<std::vector<int>> parse_cpulist(const std::string& list);

}  // namespace trainshim::cli
