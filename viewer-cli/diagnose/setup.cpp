#include "diagnose/setup.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <set>
#include <tuple>

#include "diagnose/report_model.hpp"
#include "text/format.hpp"

namespace trainshim::cli {

namespace {

std::optional<int64_t> number(const std::map<std::string, std::string>& facts, const std::string& key) {
  const auto it = facts.find(key);
  if (it == facts.end()) return std::nullopt;
  int64_t value = 0;
  const std::string& text = it->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string fact(const std::map<std::string, std::string>& facts, const std::string& key) {
  const auto it = facts.find(key);
  return it == facts.end() ? std::string() : it->second;
}

SetupItem unknown_item(SetupItemKind item) {
  SetupItem s;
  s.item = item;
  s.observed = "unknown";
  return s;
}

bool checked(const ProcessReport& p) { return !p.host_report.sampler.empty() || !p.host_report.facts.empty(); }

// What the processes of one node (one database, one host name) share.
struct Node {
  int64_t ranks = 0;              // the larger of the processes checked on it and LOCAL_WORLD_SIZE
  std::optional<int64_t> gpus;    // GPUs it has, as seen by a process that sees them all
  std::set<std::string> bus_ids;  // the GPUs its processes use
};

using NodeKey = std::pair<const RunDatabase*, std::string>;

std::map<NodeKey, Node> nodes_of(const Report& report) {
  std::map<NodeKey, Node> nodes;
  std::map<NodeKey, int64_t> processes;
  for (const ProcessReport& p : report.processes) {
    if (!checked(p)) continue;
    Node& n = nodes[{p.db, p.host}];
    ++processes[{p.db, p.host}];
    // Every rank of a torchrun job carries the same LOCAL_WORLD_SIZE: the node's ranks, not one more each.
    if (const auto local = number(p.host_report.facts, "env.LOCAL_WORLD_SIZE")) n.ranks = std::max(n.ranks, *local);
    // With CUDA_VISIBLE_DEVICES a process sees only its own GPUs: not the node's count.
    if (const auto gpus = number(p.host_report.facts, "gpus");
        gpus && !p.host_report.facts.count("env.CUDA_VISIBLE_DEVICES"))
      n.gpus = std::max(n.gpus.value_or(0), *gpus);
    if (const std::string bus = fact(p.host_report.facts, "gpu_pci_bus_id"); !bus.empty()) n.bus_ids.insert(bus);
  }
  for (auto& [key, node] : nodes) node.ranks = std::max(node.ranks, processes[key]);
  return nodes;
}

// The cores one rank may use: its affinity where the launcher narrowed it, else the node's online
// CPUs shared among its GPUs (or its ranks, where the GPUs are not known).
std::optional<int64_t> cores_per_rank(const ProcessReport& p, const Node& node) {
  const auto affinity = parse_cpulist(fact(p.host_report.facts, "affinity"));
  const auto online = parse_cpulist(fact(p.host_report.facts, "cpus_online"));
  if (affinity && !affinity->empty() && (!online || affinity->size() < online->size()))
    return int64_t(affinity->size());
  if (!online || online->empty()) return std::nullopt;
  const int64_t sharers = std::max<int64_t>({1, node.gpus.value_or(0), node.gpus ? 0 : node.ranks});
  return std::max<int64_t>(1, int64_t(online->size()) / sharers);
}

SetupItem dataloader_workers(const ProcessReport& p, std::optional<int64_t> cores) {
  SetupItem s = unknown_item(SetupItemKind::DataloaderWorkers);
  const auto workers = number(p.host_report.facts, "workers_max");
  if (!workers) return s;
  const int64_t seen = number(p.host_report.facts, "workers_seen").value_or(*workers);
  const std::optional<InputWait>& wait = p.host_report.input_wait;
  const bool input_bound = wait && wait->share() >= kInputBoundShare;
  // One core stays with the rank's own main thread.
  const int64_t room = cores ? std::max<int64_t>(1, *cores - 1) : 0;
  s.observed = fmt::format("{} worker{} at most{}", *workers, *workers == 1 ? "" : "s",
                           seen > *workers ? fmt::format(", {} started", seen) : std::string());
  if (wait)
    s.observed +=
        fmt::format("; input wait {:.0f} % of {}", 100 * wait->share(), wait->steps ? "step time" : "the run");
  if (cores) s.observed += fmt::format("; {} core{} per GPU", *cores, *cores == 1 ? "" : "s");
  std::vector<std::string> fixes;
  if (*workers == 0 && input_bound)
    fixes.push_back(cores ? fmt::format("DataLoader(num_workers={}): the main thread loads every batch itself", room)
                          : "DataLoader(num_workers > 0): the main thread loads every batch itself");
  else if (input_bound && cores && *workers < room)
    fixes.push_back(fmt::format("more workers (num_workers up to {}) and a deeper prefetch_factor", room));
  if (cores && *workers > *cores)
    fixes.push_back(
        fmt::format("at most {} workers: {} workers on {} cores compete with the main thread", room, *workers, *cores));
  if (seen > *workers)
    fixes.push_back(fmt::format("persistent_workers=True: {} worker processes started for at most {} alive, re-forked "
                                "each epoch",
                                seen, *workers));
  s.ok = fixes.empty();
  s.recommended =
      s.ok ? (cores ? fmt::format("num_workers up to {}", room) : std::string("num_workers > 0 when input-bound"))
           : fmt::format("{}", fmt::join(fixes, "; "));
  return s;
}

SetupItem numa_affinity(const ProcessReport& p) {
  SetupItem s = unknown_item(SetupItemKind::NumaAffinity);
  const auto affinity = parse_cpulist(fact(p.host_report.facts, "affinity"));
  const auto node = number(p.host_report.facts, "gpu_numa_node");
  const std::string node_cpus_text = fact(p.host_report.facts, "gpu_numa_cpus");
  const auto node_cpus = parse_cpulist(node_cpus_text);
  if (!affinity || affinity->empty() || !node || *node < 0 || !node_cpus || node_cpus->empty()) return s;
  const std::string bus = fact(p.host_report.facts, "gpu_pci_bus_id");
  s.recommended = fmt::format("taskset/numactl to CPUs {} (NUMA node {} of GPU {})", node_cpus_text, *node,
                              bus.empty() ? "?" : bus);
  s.ok = std::includes(node_cpus->begin(), node_cpus->end(), affinity->begin(), affinity->end());
  s.observed = fmt::format("affinity CPUs {}", fact(p.host_report.facts, "affinity"));
  if (!s.ok) s.observed += fmt::format(", not within NUMA node {} of its GPU", *node);
  return s;
}

SetupItem omp_threads(const ProcessReport& p, std::optional<int64_t> cores, const Node& node) {
  SetupItem s = unknown_item(SetupItemKind::OmpThreads);
  if (p.host_report.facts.empty()) return s;
  s.recommended = cores ? fmt::format("OMP_NUM_THREADS={} or fewer (the cores per rank)", *cores)
                        : std::string("OMP_NUM_THREADS at most the cores per rank");
  const auto it = p.host_report.facts.find("env.OMP_NUM_THREADS");
  if (it == p.host_report.facts.end()) {
    // PyTorch then starts a thread per core in every rank: a node's ranks oversubscribe its cores.
    s.ok = node.ranks <= 1;
    s.observed = s.ok ? "unset (one rank on the node: PyTorch uses every core)"
                      : fmt::format("unset: each of the {} ranks on the node starts a thread per core", node.ranks);
    return s;
  }
  s.observed = "OMP_NUM_THREADS=" + it->second;
  const auto threads = number(p.host_report.facts, "env.OMP_NUM_THREADS");
  s.ok = !(threads && cores && *threads > *cores);
  if (!s.ok) s.observed += fmt::format(", more than the {} cores per rank", *cores);
  return s;
}

SetupItem nccl_env(const ProcessReport& p) {
  SetupItem s = unknown_item(SetupItemKind::NcclEnv);
  if (p.host_report.facts.empty()) return s;
  std::vector<std::string> set, fixes;
  for (const auto& [key, value] : p.host_report.facts) {
    if (!key.starts_with("env.NCCL_")) continue;
    const std::string name = key.substr(4);
    // NVIDIA's CUDA container images set NCCL_VERSION to label the NCCL they install; NCCL reads
    // no such setting.
    if (name == "NCCL_VERSION") continue;
    set.push_back(name + "=" + value);
    if ((name == "NCCL_P2P_DISABLE" || name == "NCCL_IB_DISABLE" || name == "NCCL_SHM_DISABLE") && value == "1")
      fixes.push_back(fmt::format("unset {} ({})", name,
                                  name == "NCCL_P2P_DISABLE" ? "it turns off NVLink and PCIe peer-to-peer transfers"
                                  : name == "NCCL_IB_DISABLE"
                                      ? "it turns off InfiniBand: traffic goes over sockets"
                                      : "it turns off shared-memory transfers within the node"));
    if (name == "NCCL_DEBUG" && (value == "INFO" || value == "TRACE"))
      fixes.push_back(fmt::format("NCCL_DEBUG=WARN ({} logs every communicator setup{})", value,
                                  value == "TRACE" ? " and every call" : ""));
  }
  s.observed = set.empty() ? std::string("no NCCL_* variable set") : fmt::format("{}", fmt::join(set, ", "));
  s.ok = fixes.empty();
  s.recommended =
      s.ok ? std::string("no NCCL_*_DISABLE, NCCL_DEBUG unset or WARN") : fmt::format("{}", fmt::join(fixes, "; "));
  return s;
}

SetupItem ranks_per_node(const ProcessReport& p, const Node& node) {
  SetupItem s = unknown_item(SetupItemKind::RanksPerNode);
  // The GPUs of the node: as a process that sees them all counts them, else those its ranks use.
  const std::optional<int64_t> gpus = node.gpus              ? node.gpus
                                      : node.bus_ids.empty() ? std::nullopt
                                                             : std::optional<int64_t>(node.bus_ids.size());
  if (!gpus || *gpus <= 0) return s;
  s.observed = fmt::format("{} rank{} on {}, {} GPU{}", node.ranks, node.ranks == 1 ? "" : "s", p.host, *gpus,
                           *gpus == 1 ? "" : "s");
  s.recommended = fmt::format("one rank per GPU: {} per node (torchrun --nproc_per_node={})", *gpus, *gpus);
  const bool shared = !node.bus_ids.empty() && node.ranks > int64_t(node.bus_ids.size());
  s.ok = node.ranks == *gpus && !shared;
  if (shared)
    s.observed += fmt::format(", ranks sharing {} GPU{}", node.bus_ids.size(), node.bus_ids.size() == 1 ? "" : "s");
  return s;
}

SetupItem mixed_precision(const ProcessReport& p) {
  SetupItem s = unknown_item(SetupItemKind::MixedPrecision);
  s.recommended = "torch.autocast('cuda', dtype=torch.bfloat16), or TF32 for FP32 matmuls "
                  "(torch.set_float32_matmul_precision('high'))";
  const KernelSummary& k = p.gpu.kernels;
  if (k.busy_ns <= 0) return s;
  s.ok = k.top_fp32_gemm.empty() || k.fp32_gemm_share < kFp32GemmShare;
  s.observed = k.fp32_gemm_ns > 0 ? fmt::format("FP32 GEMMs {:.1f} % of GPU busy time", 100 * k.fp32_gemm_share)
                                  : std::string("no FP32 GEMM");
  return s;
}

}  // namespace

// Input copies are those of the training loop: where the steps are known, a pageable H2D site that
// copies in fewer than half of them is set-up (a model's weights, DDP's shape check at
// construction), which pinning the input would not change.
SetupItem pinned_memory(const ProcessReport& p) {
  SetupItem s = unknown_item(SetupItemKind::PinnedMemory);
  // Without workers, DataLoader(pin_memory=True) pins each batch in the main thread: a copy as long
  // as the staging copy it saves. A worker's batches are pinned by the pin-memory thread, beside the loop.
  s.recommended = number(p.host_report.facts, "workers_max") == 0
                      ? "DataLoader(num_workers>=1, pin_memory=True), whose pin-memory thread pins beside the loop "
                        "(without workers the main thread pins each batch, a copy as long as the one it saves), "
                        "and batch.to(device, non_blocking=True)"
                      : "DataLoader(pin_memory=True) and batch.to(device, non_blocking=True)";
  int64_t pageable = 0, pageable_bytes = 0, h2d = 0;
  for (const CopyRow& c : p.copies) {
    if (c.direction != Direction::HostToDevice) continue;
    h2d += c.calls;
    if (c.host_memory == HostMemory::Pageable) {
      pageable += c.calls;
      pageable_bytes += c.bytes;
    }
  }
  if (h2d == 0) return s;
  int64_t set_up = 0, set_up_bytes = 0;
  if (const int64_t steps = p.sync_sites.steps.count; steps >= 3)
    for (const SyncSite& site : p.sync_sites.pageable_copies)
      if (site.copy_direction == Direction::HostToDevice && site.calls * 2 < steps) {
        set_up += site.calls;
        set_up_bytes += site.bytes;
      }
  s.ok = pageable == set_up;
  if (pageable == 0) s.observed = fmt::format("{} H2D copies, none from pageable memory", with_thousands(h2d));
  else if (s.ok)
    s.observed = fmt::format("{} H2D copies; {} from pageable memory, at set-up only", with_thousands(h2d),
                             with_thousands(pageable));
  else
    s.observed = fmt::format("{} of {} H2D copies from pageable memory ({})", with_thousands(pageable - set_up),
                             with_thousands(h2d), human_bytes(pageable_bytes - set_up_bytes));
  return s;
}

std::optional<std::vector<int>> parse_cpulist(const std::string& list) {
  if (list.empty()) return std::nullopt;
  std::vector<int> cpus;
  auto read = [](std::string_view text, int& value) {
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    return error == std::errc() && end == text.data() + text.size() && value >= 0;
  };
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const auto comma = std::min(list.find(',', pos), list.size());
    const std::string_view part(list.data() + pos, comma - pos);
    const auto dash = part.find('-');
    int first = 0, last = 0;
    if (dash == std::string_view::npos) {
      if (!read(part, first)) return std::nullopt;
      last = first;
    } else if (!read(part.substr(0, dash), first) || !read(part.substr(dash + 1), last) || last < first ||
               last - first > 65536) {
      return std::nullopt;
    }
    for (int c = first; c <= last; ++c) cpus.push_back(c);
    pos = comma + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::vector<SetupItem> check_setup(const Report& report) {
  std::vector<SetupItem> out;
  const std::map<NodeKey, Node> nodes = nodes_of(report);
  for (const ProcessReport& p : report.processes) {
    if (!checked(p)) continue;
    const Node& node = nodes.at({p.db, p.host});
    const std::optional<int64_t> cores = cores_per_rank(p, node);
    for (SetupItem item : {dataloader_workers(p, cores), pinned_memory(p), numa_affinity(p),
                           omp_threads(p, cores, node), nccl_env(p), ranks_per_node(p, node), mixed_precision(p)}) {
      item.rank = p.rank;
      item.pid = p.pid;
      if (item.observed.empty()) item.observed = "unknown";
      out.push_back(std::move(item));
    }
  }
  return out;
}

}  // namespace trainshim::cli
