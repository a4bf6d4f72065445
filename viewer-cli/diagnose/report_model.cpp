#include "diagnose/report_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "store/stripped_libraries.hpp"

namespace trainshim::cli {

namespace {

// Calls work(0) .. work(n - 1), on as many threads as there are cores (at most n); rethrows the
// first exception once every thread is done.
void for_each_parallel(std::size_t n, const std::function<void(std::size_t)>& work) {
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_lock;
  auto run = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        work(i);
      } catch (...) {
        const std::lock_guard lock(failure_lock);
        if (!failure) failure = std::current_exception();
      }
    }
  };
  const std::size_t threads = std::min<std::size_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < threads; ++t) helpers.emplace_back(run);
  run();
  for (auto& h : helpers) h.join();
  if (failure) std::rethrow_exception(failure);
}

// Sums rows that share a key across processes.
template <class Row, class Key>
std::vector<Row> merge(const std::vector<ProcessReport>& processes, std::vector<Row> ProcessReport::*rows, Key key) {
  std::map<decltype(key(std::declval<Row>())), Row> merged;
  for (const auto& p : processes)
    for (const Row& r : p.*rows) {
      auto [it, fresh] = merged.emplace(key(r), r);
      if (fresh) continue;
      Row& m = it->second;
      m.calls += r.calls;
      if constexpr (requires { r.bytes; }) m.bytes += r.bytes;
      if constexpr (requires { r.host_ns; }) m.host_ns += r.host_ns;
      if constexpr (requires { r.blocked_ns; }) m.blocked_ns += r.blocked_ns;
    }
  std::vector<Row> out;
  for (auto& [k, r] : merged) out.push_back(r);
  return out;
}

}  // namespace

std::string finding_kind_name(const Finding& finding) { return finding_kind_name(finding.kind, finding.setup_item); }

std::string finding_kind_name(FindingKind kind, SetupItemKind setup_item) {
  if (kind == FindingKind::Setup) return fmt::format("setup_{}", setup_item_name(setup_item));
  switch (kind) {
#define TS_FINDING(value, name) \
  case FindingKind::value:      \
    return name;
#include "diagnose/finding_kinds.def"
#undef TS_FINDING
  }
  return "";
}

int64_t steps_of_rank(const Report& report, int rank) {
  for (const auto& p : report.processes)
    if (p.rank == rank) return p.sync_sites.steps.count;
  return 0;
}

Report read_report(const std::vector<const RunDatabase*>& databases, const std::string& step_name,
                   int64_t idle_gap_ns) {
  Report report;
  for (const RunDatabase* db : databases) {
    const std::string job = db->meta("job");
    if (report.job.empty()) report.job = job;
    else if (report.job != job) report.job += "+" + job;
    report.database += (report.database.empty() ? "" : ", ") + db->path();
    const std::map<int64_t, int64_t> last_progress = read_last_progress(*db);
    for (ProcessRow& row : read_processes(*db)) {
      ProcessReport p;
      p.db = db;
      p.id = row.id;
      p.rank = row.rank;
      p.local_rank = row.local_rank;
      p.world_size = row.world_size;
      p.pid = row.pid;
      p.host = std::move(row.host);
      p.command = std::move(row.command);
      p.ended = row.ended;
      p.events = row.events;
      if (const auto it = last_progress.find(row.id); it != last_progress.end()) p.last_progress_unix_ns = it->second;
      p.python_version = std::move(row.python_version);
      p.python_stacks_unavailable = std::move(row.python_stacks_unavailable);
      p.gpu.timeline = std::move(row.gpu_timeline);
      p.host_report.sampler = std::move(row.sampler);
      p.host_report.sample_hz = row.sample_hz;
      p.lost = row.lost;
      p.gpu.records = row.gpu_records;
      p.host_report.counters = row.sampler_counters;
      report.processes.push_back(std::move(p));
    }
  }
  // Ranks first, in order, then processes no launcher numbered; databases of several nodes merge.
  std::stable_sort(
      report.processes.begin(), report.processes.end(), [](const ProcessReport& a, const ProcessReport& b) {
        return std::make_tuple(a.rank < 0, a.rank, a.host, a.pid) < std::make_tuple(b.rank < 0, b.rank, b.host, b.pid);
      });
  std::map<std::pair<const RunDatabase*, int64_t>, std::size_t> order;
  for (const ProcessReport& p : report.processes) order.emplace(std::pair{p.db, p.id}, order.size());
  // Each database is read by one thread (its connection is never shared); a job's databases, one
  // per node, are read side by side.
  std::vector<std::vector<ProcessCollectives>> read(databases.size());
  for_each_parallel(databases.size(), [&](std::size_t i) {
    const RunDatabase* db = databases[i];
    std::map<int64_t, int> ranks;
    for (const ProcessReport& p : report.processes)
      if (p.db == db) ranks.emplace(p.id, p.rank);
    std::map<int64_t, CollectiveCalls> collectives = load_collective_calls(*db, ranks);
    for (ProcessReport& p : report.processes) {
      if (p.db != db) continue;
      CollectiveCalls& c = collectives.at(p.id);
      p.copies = read_copy_totals(*db, p.id);
      p.api_waits = read_wait_totals(*db, p.id, waits_or_polls);
      p.collectives = read_collective_totals(*db, p.id);
      for (auto& [key, totals] : c.by_communicator) p.communicator_collectives.push_back(std::move(totals));
      p.p2p = c.p2p_calls;
      p.sync_sites = load_syncs(*db, p.id, step_name, std::exchange(c.sequence, {}));
      const GpuRecordCounters records = p.gpu.records;
      p.gpu = load_gpu_timeline(*db, p.id, p.gpu.timeline, p.sync_sites, idle_gap_ns);
      p.gpu.records = records;
      load_host(*db, p.id, p.pid, p.sync_sites.steps, p.host_report);
      read[i].push_back({db, p.id, p.rank, p.sync_sites.steps.count, p.sync_sites.steps.starts_ns, std::move(c)});
    }
  });
  std::vector<ProcessCollectives> refs;
  for (auto& list : read) std::move(list.begin(), list.end(), std::back_inserter(refs));
  // In report order: the waits' analysis sees the ranks as the report lists them.
  std::stable_sort(refs.begin(), refs.end(), [&](const ProcessCollectives& a, const ProcessCollectives& b) {
    return order.at({a.db, a.process_id}) < order.at({b.db, b.process_id});
  });
  report.waits = load_waits(refs);
  if (const int straggler = report.waits.analysis.straggler; straggler >= 0)
    for (const ProcessReport& p : report.processes)
      if (p.rank == straggler) {
        report.waits.straggler_doing =
            load_straggler_doing(*p.db, p.id, p.pid, straggler, report.waits.analysis.straggler_late);
        break;
      }
  // The rank that arrives last at the collectives waits for no one: with every rank on the GPU
  // timeline, the shortest communication per step is the collectives' own time.
  int64_t transfer_ns = 0;
  if (report.processes.size() > 1) {
    std::vector<int64_t> communication;
    for (const ProcessReport& p : report.processes) communication.push_back(communication_ns_per_step(p.gpu));
    const int64_t shortest = *std::min_element(communication.begin(), communication.end());
    if (shortest > 0) transfer_ns = shortest;
  }
  for (ProcessReport& p : report.processes)
    p.step_breakdown = step_breakdown(p.sync_sites, p.gpu, p.host_report, report.waits.analysis.waits_of(p.rank),
                                      report.waits.analysis.straggler, transfer_ns);
  for (const RunDatabase* db : databases)
    for (HangRow& hang : read_hangs(*db)) report.hangs.push_back(std::move(hang));
  for (const RunDatabase* db : databases)
    for (std::string& library : stripped_torch_libraries(*db))
      if (std::find(report.stripped_libraries.begin(), report.stripped_libraries.end(), library) ==
          report.stripped_libraries.end())
        report.stripped_libraries.push_back(std::move(library));

  report.total_copies = merge(report.processes, &ProcessReport::copies, [](const CopyRow& r) {
    return std::make_pair(direction_name(r.direction), host_memory_name(r.host_memory));
  });
  report.total_syncs = merge(report.processes, &ProcessReport::api_waits, [](const SyncRow& r) { return r.api; });
  report.total_collectives =
      merge(report.processes, &ProcessReport::collectives, [](const CollectiveRow& r) { return r.op; });
  for (const auto& p : report.processes) report.total_lost += p.lost;
  return report;
}

bool keep_only_rank(Report& report, int rank) {
  const auto other = [rank](const auto& item) { return item.rank != rank; };
  if (std::all_of(report.processes.begin(), report.processes.end(), other)) return false;
  std::erase_if(report.processes, other);
  std::erase_if(report.setup, other);
  std::erase_if(report.findings, [rank](const Finding& f) {
    return f.rank != rank && f.kind != FindingKind::Straggler && f.kind != FindingKind::Hang &&
           f.kind != FindingKind::StrippedLibrary;
  });
  std::erase_if(report.diagnosis.causes, [rank](const RootCause& c) {
    return !c.ranks.empty() && std::find(c.ranks.begin(), c.ranks.end(), rank) == c.ranks.end();
  });
  return true;
}

}  // namespace trainshim::cli
