#include "report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "format.hpp"
#include "stripped_libraries.hpp"

namespace trainshim::cli {

namespace {

std::string rank_label(int rank) { return rank < 0 ? std::string("?") : std::to_string(rank); }

std::string rank_words(const ProcessReport& p) {
  return p.rank < 0 ? fmt::format("process {}", p.pid) : fmt::format("rank {}", p.rank);
}

std::string site_location(const SyncSite& site) {
  std::string where = site.file.empty() ? std::string("?") : fmt::format("{}:{}", site.file, site.line);
  if (!site.function.empty()) where += " in " + site.function;
  return where;
}

double per_step(int64_t calls, const RankSyncs& rs) { return rs.steps.count ? double(calls) / double(rs.steps.count) : 0; }

double per_second(int64_t calls, const RankSyncs& rs) {
  return rs.span_ns > 0 ? double(calls) * 1e9 / double(rs.span_ns) : 0;
}

double share_of_step(int64_t blocked_ns, const RankSyncs& rs) {
  return rs.span_ns > 0 ? double(blocked_ns) / double(rs.span_ns) : 0;
}

std::string rate_words(int64_t calls, const RankSyncs& rs) {
  if (rs.steps.count) return fmt::format("{:.1f} times per step", per_step(calls, rs));
  return fmt::format("{:.1f} times per second", per_second(calls, rs));
}

std::string share_words(int64_t blocked_ns, const RankSyncs& rs) {
  return rs.span_ns > 0 ? fmt::format(", {:.1f} % of {}", 100 * share_of_step(blocked_ns, rs),
                                      rs.steps.count ? "step time" : "the run")
                        : std::string();
}

void load_process_details(const RunDatabase& db, int64_t id, ProcessReport& p) {
  const Vocabulary& names = db.vocabulary();
  Statement copies(db,
                   ("SELECT direction, host_memory, sum(count), sum(bytes), sum(total_ns) FROM calls WHERE process_id = ? "
                    "AND api IN (SELECT id FROM apis WHERE class IN " + api_classes_sql(ApiClass::Copy) + ") "
                    "GROUP BY direction, host_memory ORDER BY direction, host_memory").c_str());
  copies.bind(1, id);
  while (copies.step())
    p.copies.push_back({names.direction(copies.integer(0)), names.host_memory(copies.integer(1)), copies.integer(2),
                        copies.integer(3), copies.integer(4)});

  Statement syncs(db,
                  ("SELECT a.name, sum(c.count), sum(c.total_ns) FROM calls c JOIN apis a ON a.id = c.api "
                   "WHERE c.process_id = ? AND a.class IN " + api_classes_sql(waits_or_polls) +
                   " GROUP BY c.api ORDER BY a.name").c_str());
  syncs.bind(1, id);
  while (syncs.step()) p.api_waits.push_back({syncs.text(0), syncs.integer(1), syncs.integer(2)});

  Statement collectives(db,
                        ("SELECT a.name, sum(c.count), sum(c.bytes), sum(c.total_ns) FROM calls c "
                         "JOIN apis a ON a.id = c.api WHERE c.process_id = ? AND a.class IN " +
                         api_classes_sql(ApiClass::Collective) + " GROUP BY c.api ORDER BY a.name").c_str());
  collectives.bind(1, id);
  while (collectives.step())
    p.collectives.push_back({collective_op_name(collectives.text(0)), collectives.integer(1),
                             collectives.integer(2), collectives.integer(3)});
}

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

int64_t steps_of_rank(const Report& report, int rank) {
  for (const auto& p : report.processes)
    if (p.rank == rank) return p.sync_sites.steps.count;
  return 0;
}

std::string host_activity_words(const std::vector<HostActivity>& activity) {
  std::string out;
  for (std::size_t i = 0; i < activity.size() && i < 3; ++i)
    out += fmt::format("{}{}:{} in {} ({:.0f} %)", i ? ", " : "", activity[i].file, activity[i].line,
                       activity[i].function, 100 * activity[i].share);
  return out;
}

void add_straggler_finding(Report& report) {
  const CollectiveAnalysis& a = report.waits.analysis;
  if (a.straggler < 0) return;
  const RankWaits* s = nullptr;
  for (const auto& r : a.ranks)
    if (r.rank == a.straggler) s = &r;
  if (!s) return;
  const int64_t steps = steps_of_rank(report, a.straggler);
  Finding f;
  f.kind = "straggler";
  f.rank = a.straggler;
  f.calls = s->last_count;
  f.cost_ns = s->imposed_ns;
  f.message = fmt::format("rank {} arrives last at {:.1f} % of its collectives and costs the other ranks {}", a.straggler,
                          s->collectives ? 100.0 * double(s->last_count) / double(s->collectives) : 0.0,
                          steps ? human_duration(s->imposed_ns / steps) + " per step"
                                : human_duration(s->imposed_ns) + " in all");
  f.advice = report.waits.straggler_host.empty()
                 ? fmt::format("find what rank {} does on the host before its collectives (data loading, logging, "
                               "evaluation on one rank)", a.straggler)
                 : fmt::format("while rank {} was late its host was in {}: balance that work across ranks or move it "
                               "off the critical path", a.straggler, host_activity_words(report.waits.straggler_host));
  report.findings.push_back(std::move(f));
}

void add_findings(Report& report) {
  for (const HangRow& h : report.hangs) {
    Finding f;
    f.kind = "hang";
    f.rank = h.missing.empty() ? -1 : h.missing.front();
    f.cost_ns = h.waited_ns;
    f.message = h.message;
    f.advice = "look at what the missing rank was doing last: a rank that skips a collective (an evaluation or a "
               "checkpoint on one rank, a data-dependent branch) leaves every other rank waiting";
    report.findings.push_back(std::move(f));
  }
  add_straggler_finding(report);
  for (const ProcessReport& p : report.processes) {
    for (const CopyRow& c : p.copies) {
      if (c.host_memory != HostMemory::Pageable ||
          (c.direction != Direction::HostToDevice && c.direction != Direction::DeviceToHost))
        continue;
      Finding f;
      f.kind = "pageable_copy";
      f.rank = p.rank;
      f.calls = c.calls;
      f.bytes = c.bytes;
      f.cost_ns = c.host_ns;
      const bool h2d = c.direction == Direction::HostToDevice;
      f.message = fmt::format("{} copied {} {} {} pageable memory in {} calls ({} of host time)", rank_words(p),
                              human_bytes(c.bytes), h2d ? "H2D" : "D2H", h2d ? "from" : "into",
                              with_thousands(c.calls), human_duration(c.host_ns));
      f.advice = h2d ? "pin the host buffer (DataLoader pin_memory=True, or tensor.pin_memory()) and copy "
                       "with non_blocking=True so the copy overlaps compute"
                     : "copy into a pinned buffer with non_blocking=True; into pageable memory every D2H copy "
                       "blocks the host until the GPU reaches it";
      report.findings.push_back(std::move(f));
    }
    const RankSyncs& rs = p.sync_sites;
    for (const SyncSite& site : rs.hidden) {
      Finding f;
      f.kind = "hidden_sync";
      f.rank = p.rank;
      f.calls = site.calls;
      f.cost_ns = site.blocked_ns;
      f.message = fmt::format("{}: {} at {} blocks the host {} ({} in all{})", rank_words(p),
                              site.classification.operation, site_location(site), rate_words(site.calls, rs),
                              human_duration(site.blocked_ns), share_words(site.blocked_ns, rs));
      f.advice = site.classification.advice;
      report.findings.push_back(std::move(f));
    }
    if (p.lost.total() > 0) {
      Finding f;
      f.kind = "dropped_events";
      f.rank = p.rank;
      f.calls = p.lost.total();
      f.message = fmt::format("{} lost {} records ({}): its figures are lower bounds", rank_words(p),
                              with_thousands(p.lost.total()), lost_words(p.lost));
      f.advice = loss_advice(p.lost);
      report.findings.push_back(std::move(f));
    }
  }
  for (const std::string& library : report.stripped_libraries) {
    Finding f;
    f.kind = "stripped_library";
    f.message = fmt::format("{} has no symbol table (.symtab): PyTorch's binding frames have no names there, so "
                            "operations are named from its exported op-entry frames alone and "
                            "torch.cuda.Event/Stream.synchronize() can show as unclassified", library);
    f.advice = "profile with the PyPI wheel of the same version, or a build that strips debug information only "
               "(strip --strip-debug)";
    report.findings.push_back(std::move(f));
  }
  std::stable_sort(report.findings.begin(), report.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.cost_ns > b.cost_ns; });
}

}  // namespace

std::string loss_advice(const LostEvents& lost) {
  std::vector<std::string> causes;
  if (lost.dropped_ring_full > 0)
    causes.push_back(
        "ring full: raise TRAINSHIM_FIRST_RING_EVENTS (the main thread's ring), TRAINSHIM_RING_EVENTS (the other "
        "threads') or TRAINSHIM_RINGS");
  if (lost.dropped_side_full > 0) causes.push_back("side ring full: raise TRAINSHIM_SIDE_RECORDS");
  if (lost.dropped_not_ready > 0)
    causes.push_back("before recording started: other threads called CUDA while the first call set recording up, "
                     "which larger rings do not change; make one CUDA call before starting threads to record them");
  if (lost.lost_unpublished > 0)
    causes.push_back("unfinished at exit: a thread was inside a CUDA call when its process ended or was killed");
  if (lost.malformed > 0)
    causes.push_back("malformed: records that failed validation were skipped; check that nothing else writes into "
                     "/dev/shm/trainshim-*");
  return fmt::format("{}", fmt::join(causes, "; "));
}

std::string collective_op_name(const std::string& api) {
  std::string name = api.starts_with("nccl") ? api.substr(4) : api;
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (std::isupper(static_cast<unsigned char>(c)) && i > 0) out.push_back('_');
    out.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

Report load_report(const RunDatabase& db, const std::string& step_name) { return load_report({&db}, step_name); }

Report load_report(const std::vector<const RunDatabase*>& databases, const std::string& step_name) {
  Report report;
  for (const RunDatabase* db : databases) {
    const std::string job = db->meta("job");
    if (report.job.empty()) report.job = job;
    else if (report.job != job) report.job += "+" + job;
    report.database += (report.database.empty() ? "" : ", ") + db->path();
    Statement processes(*db,
                        ("SELECT id, rank, local_rank, world_size, pid, host, command, ended, events, python_version, "
                         "python_stacks_unavailable, " + lost_columns() + " FROM processes").c_str());
    while (processes.step()) {
      ProcessReport p;
      p.db = db;
      p.id = processes.integer(0);
      p.rank = int(processes.integer(1));
      p.local_rank = int(processes.integer(2));
      p.world_size = int(processes.integer(3));
      p.pid = processes.integer(4);
      p.host = processes.text(5);
      p.command = processes.text(6);
      p.ended = processes.integer(7) != 0;
      p.events = processes.integer(8);
      p.python_version = processes.text(9);
      p.python_stacks_unavailable = processes.text(10);
      p.lost = read_lost(processes, 11);
      report.processes.push_back(std::move(p));
    }
  }
  // Ranks first, in order, then processes no launcher numbered; databases of several nodes merge.
  std::stable_sort(report.processes.begin(), report.processes.end(), [](const ProcessReport& a, const ProcessReport& b) {
    return std::make_tuple(a.rank < 0, a.rank, a.host, a.pid) < std::make_tuple(b.rank < 0, b.rank, b.host, b.pid);
  });
  std::map<std::pair<const RunDatabase*, int64_t>, std::size_t> order;
  for (const ProcessReport& p : report.processes) order.emplace(std::pair{p.db, p.id}, order.size());
  // Each database is read by one thread (its connection is never shared); a job's databases, one
  // per node, are read side by side.
  std::vector<std::vector<ProcessRef>> read(databases.size());
  for_each_parallel(databases.size(), [&](std::size_t i) {
    const RunDatabase* db = databases[i];
    std::map<int64_t, int> ranks;
    for (const ProcessReport& p : report.processes)
      if (p.db == db) ranks.emplace(p.id, p.rank);
    std::map<int64_t, CollectiveCalls> collectives = load_collective_calls(*db, ranks);
    for (ProcessReport& p : report.processes) {
      if (p.db != db) continue;
      CollectiveCalls& c = collectives.at(p.id);
      load_process_details(*db, p.id, p);
      p.sync_sites = load_syncs(*db, p.id, step_name, std::exchange(c.sequence, {}));
      read[i].push_back({db, p.id, p.rank, p.sync_sites.steps.count, std::move(c)});
    }
  });
  std::vector<ProcessRef> refs;
  for (auto& list : read) std::move(list.begin(), list.end(), std::back_inserter(refs));
  // In report order: the waits' analysis sees the ranks as the report lists them.
  std::stable_sort(refs.begin(), refs.end(), [&](const ProcessRef& a, const ProcessRef& b) {
    return order.at({a.db, a.process_id}) < order.at({b.db, b.process_id});
  });
  report.waits = load_waits(refs);
  for (const RunDatabase* db : databases) {
    Statement hangs(*db, "SELECT communicator, sequence, op, waiting_ranks, missing_ranks, waited_ns, message "
                         "FROM hangs ORDER BY detected_unix, communicator, sequence");
    auto ranks = [](const std::string& list) {
      std::vector<int> out;
      for (std::size_t pos = 0; pos < list.size();) {
        const auto comma = list.find(',', pos);
        out.push_back(std::stoi(list.substr(pos, comma - pos)));
        pos = comma == std::string::npos ? list.size() : comma + 1;
      }
      return out;
    };
    while (hangs.step())
      report.hangs.push_back({hangs.text(0), hangs.text(2), hangs.text(6), hangs.integer(1), hangs.integer(5),
                              ranks(hangs.text(3)), ranks(hangs.text(4))});
  }
  for (const RunDatabase* db : databases)
    for (std::string& library : stripped_torch_libraries(*db))
      if (std::find(report.stripped_libraries.begin(), report.stripped_libraries.end(), library) ==
          report.stripped_libraries.end())
        report.stripped_libraries.push_back(std::move(library));

  report.total_copies = merge(report.processes, &ProcessReport::copies,
                              [](const CopyRow& r) {
                                return std::make_pair(direction_name(r.direction), host_memory_name(r.host_memory));
                              });
  report.total_syncs = merge(report.processes, &ProcessReport::api_waits, [](const SyncRow& r) { return r.api; });
  report.total_collectives =
      merge(report.processes, &ProcessReport::collectives, [](const CollectiveRow& r) { return r.op; });
  for (const auto& p : report.processes) report.total_lost += p.lost;
  add_findings(report);
  return report;
}

namespace {

void render_tables(std::string& out, const std::vector<CopyRow>& copies, const std::vector<SyncRow>& syncs,
                   const std::vector<CollectiveRow>& collectives, int64_t lost) {
  if (!copies.empty()) {
    out += fmt::format("  {:<14}{:<7}{:<10}{:>12}{:>12}{:>12}\n", "copies", "dir", "memory", "calls", "bytes", "host time");
    for (const auto& c : copies)
      out += fmt::format("  {:<14}{:<7}{:<10}{:>12}{:>12}{:>12}\n", "", direction_name(c.direction),
                         host_memory_name(c.host_memory),
                         with_thousands(c.calls), human_bytes(c.bytes), human_duration(c.host_ns));
  }
  if (!syncs.empty()) {
    out += fmt::format("  {:<14}{:<29}{:>12}{:>12}\n", "syncs", "api", "calls", "blocked");
    for (const auto& s : syncs)
      out += fmt::format("  {:<14}{:<29}{:>12}{:>12}\n", "", s.api, with_thousands(s.calls), human_duration(s.blocked_ns));
  }
  if (!collectives.empty()) {
    out += fmt::format("  {:<14}{:<17}{:>12}{:>12}{:>12}\n", "collectives", "op", "calls", "bytes", "host time");
    for (const auto& c : collectives)
      out += fmt::format("  {:<14}{:<17}{:>12}{:>12}{:>12}\n", "", c.op, with_thousands(c.calls),
                         human_bytes(c.bytes), human_duration(c.host_ns));
  }
  if (copies.empty() && syncs.empty() && collectives.empty()) out += "  no copies, syncs or collectives recorded\n";
  out += fmt::format("  dropped events: {}\n", with_thousands(lost));
}

void render_sites(std::string& out, const std::vector<SyncSite>& sites, const RankSyncs& rs) {
  for (const auto& site : sites) {
    const std::string rate = rs.steps.count ? fmt::format("{:.1f}", per_step(site.calls, rs))
                                            : fmt::format("{:.1f}/s", per_second(site.calls, rs));
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>8.1f} %\n", site.classification.operation,
                       with_thousands(site.calls), rate, human_duration(site.blocked_ns),
                       100 * share_of_step(site.blocked_ns, rs));
    out += fmt::format("      at {}{}\n", site_location(site), site.in_backward ? " (in backward, autograd thread)" : "");
    if (!site.source.empty()) out += fmt::format("         {}\n", site.source);
  }
}

void render_sync_sections(std::string& out, const ProcessReport& p) {
  const RankSyncs& rs = p.sync_sites;
  if (rs.hidden.empty() && rs.explicit_.empty() && rs.polls.empty()) return;
  const std::string steps = rs.steps.count ? fmt::format("{} steps", with_thousands(rs.steps.count)) : "no steps found";
  out += fmt::format("  steps: {} ({})\n", steps, rs.steps.rule);
  const char* rate_header = rs.steps.count ? "per step" : "per sec";
  const char* share_header = rs.steps.count ? "of step" : "of run";
  if (!rs.hidden.empty()) {
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>10}\n", "Hidden synchronisations", "calls", rate_header,
                       "blocked", share_header);
    render_sites(out, rs.hidden, rs);
  }
  if (!rs.explicit_.empty()) {
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>10}\n", "Explicit synchronisations (asked for)", "calls",
                       rate_header, "blocked", share_header);
    render_sites(out, rs.explicit_, rs);
  }
  if (!rs.polls.empty()) {
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>10}\n", "Polls (ask, never wait)", "calls", "per sec",
                       "in calls", share_header);
    for (const auto& site : rs.polls) {
      out += fmt::format("  {:<46} {:>9} {:>9.1f} {:>10} {:>8.1f} %\n", site.classification.operation,
                         with_thousands(site.calls), per_second(site.calls, rs), human_duration(site.blocked_ns),
                         100 * share_of_step(site.blocked_ns, rs));
      out += fmt::format("      at {}\n", site_location(site));
    }
  }
}

void render_hangs(std::string& out, const Report& report) {
  if (report.hangs.empty()) return;
  out += "\nHangs (seen by the collector while the job ran)\n";
  for (const HangRow& h : report.hangs) out += fmt::format("  {}\n", h.message);
}

void render_waits(std::string& out, const Report& report) {
  const WaitReport& w = report.waits;
  const CollectiveAnalysis& a = w.analysis;
  if (a.matched == 0 && a.incomplete == 0 && w.untimed.total() == 0 &&
      w.untimed_in_group_in_progress == 0 && w.p2p.sends + w.p2p.recvs == 0)
    return;
  out += fmt::format("\nCollective waits ({} ranks, {} collectives matched on {} communicator{}{})\n", a.ranks.size(),
                     with_thousands(a.matched), a.communicators, a.communicators == 1 ? "" : "s",
                     a.incomplete ? fmt::format(", {} not seen on every rank", with_thousands(a.incomplete)) : "");
  out += fmt::format("  {:<6}{:>12}{:>12}{:>16}\n", "rank", "waited", "per step", "last to arrive");
  for (const RankWaits& r : a.ranks) {
    const int64_t steps = steps_of_rank(report, r.rank);
    out += fmt::format("  {:<6}{:>12}{:>12}{:>14.1f} %", r.rank, human_duration(r.waited_ns),
                       steps ? human_duration(r.waited_ns / steps) : std::string("-"),
                       r.collectives ? 100.0 * double(r.last_count) / double(r.collectives) : 0.0);
    if (r.rank == a.straggler)
      out += fmt::format("   <- straggler: costs the other ranks {}",
                         steps ? human_duration(r.imposed_ns / steps) + " per step" : human_duration(r.imposed_ns));
    out += "\n";
  }
  if (a.straggler >= 0 && !w.straggler_host.empty())
    out += fmt::format("  While rank {} was late, its host was in: {}\n", a.straggler,
                       host_activity_words(w.straggler_host));
  if (a.straggler < 0 && a.matched > 0) out += "  No straggler: no rank makes the others wait consistently.\n";
  out += untimed_lines(w.untimed);
  if (w.untimed_in_group_in_progress)
    out += fmt::format("  {} NCCL operations were not timed: their launch went to NCCL's own thread (non-blocking "
                       "communicator, ncclInProgress) and the program did not wait for it with "
                       "ncclCommGetAsyncError\n",
                       with_thousands(w.untimed_in_group_in_progress));
  for (const CapturedCollectives& c : w.captured)
    out += fmt::format("  communicator {:016x}: {} collectives captured into CUDA graphs; their replays are not "
                       "measured\n", c.communicator, with_thousands(c.collectives));
  if (w.p2p.sends + w.p2p.recvs)
    out += fmt::format("  point-to-point: {} sends, {} receives, {} pairs matched, {} calls unmatched, {} timed on "
                       "the GPU ({}), of which {} exchanges with every rank (all_to_all), matched as collectives\n",
                       with_thousands(w.p2p.sends), with_thousands(w.p2p.recvs), with_thousands(w.p2p.matched),
                       with_thousands(w.p2p.unmatched), with_thousands(w.p2p.timed), human_duration(w.p2p.gpu_ns),
                       with_thousands(w.p2p.exchanges));
}

}  // namespace

std::string render_text(const Report& report) {
  std::string out = fmt::format("trainshim report: job {} ({} process{}), {}\n", report.job, report.processes.size(),
                                report.processes.size() == 1 ? "" : "es", report.database);
  if (report.processes.empty()) {
    out += "\nNo process of this job made a CUDA or NCCL call that trainshim records.\n";
    return out;
  }
  for (const auto& p : report.processes) {
    out += fmt::format("\nrank {}  pid {}  host {}{}\n  {}\n", rank_label(p.rank), p.pid, p.host,
                       p.ended ? "" : "  (still running)", p.command);
    if (!p.python_stacks_unavailable.empty())
      out += fmt::format("  Python stacks unavailable: {}; sites are named by native frames\n", p.python_stacks_unavailable);
    render_tables(out, p.copies, p.api_waits, p.collectives, p.lost.total());
    render_sync_sections(out, p);
  }
  render_hangs(out, report);
  render_waits(out, report);
  if (report.processes.size() > 1) {
    out += fmt::format("\nall ranks\n");
    render_tables(out, report.total_copies, report.total_syncs, report.total_collectives, report.total_lost.total());
  }
  out += "\nFindings\n";
  if (report.findings.empty()) out += "  none: no pageable copies and no lost events\n";
  for (const auto& f : report.findings) out += fmt::format("  * {}\n    -> {}\n", f.message, f.advice);
  return out;
}

namespace {

nlohmann::ordered_json copies_json(const std::vector<CopyRow>& rows) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& c : rows)
    out.push_back({{"direction", direction_name(c.direction)}, {"host_memory", host_memory_name(c.host_memory)}, {"calls", c.calls},
                   {"bytes", c.bytes}, {"host_ns", c.host_ns}});
  return out;
}
nlohmann::ordered_json syncs_json(const std::vector<SyncRow>& rows) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& s : rows) out.push_back({{"api", s.api}, {"calls", s.calls}, {"blocked_ns", s.blocked_ns}});
  return out;
}
nlohmann::ordered_json collectives_json(const std::vector<CollectiveRow>& rows) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& c : rows)
    out.push_back({{"op", c.op}, {"calls", c.calls}, {"bytes", c.bytes}, {"host_ns", c.host_ns}});
  return out;
}
nlohmann::ordered_json rank_json(int rank) { return rank < 0 ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(rank); }

nlohmann::ordered_json sites_json(const std::vector<SyncSite>& sites, const RankSyncs& rs) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& site : sites) {
    auto python = nlohmann::ordered_json::array();
    for (const auto& f : site.python)
      python.push_back({{"file", f.file}, {"line", f.line}, {"function", f.function}, {"source", f.source}});
    auto native = nlohmann::ordered_json::array();
    for (const auto& f : site.native)
      native.push_back({{"function", f.function}, {"module", f.module}, {"file", f.file}, {"line", f.line}});
    out.push_back({{"operation", site.classification.operation},
                   {"cause", site.classification.cause},
                   {"advice", site.classification.advice},
                   {"rule", site.classification.rule},
                   {"native_frame", site.classification.native_frame},
                   {"file", site.file},
                   {"line", site.line},
                   {"function", site.function},
                   {"source", site.source},
                   {"in_backward", site.in_backward},
                   {"calls", site.calls},
                   {"per_step", rs.steps.count ? nlohmann::ordered_json(per_step(site.calls, rs)) : nullptr},
                   {"per_second", per_second(site.calls, rs)},
                   {"blocked_ns", site.blocked_ns},
                   {"bytes", site.bytes},
                   {"share_of_step", share_of_step(site.blocked_ns, rs)},
                   {"python_stack", python},
                   {"native_stack", native}});
  }
  return out;
}

}  // namespace

nlohmann::ordered_json render_json(const Report& report) {
  nlohmann::ordered_json doc;
  doc["format"] = "trainshim-report/1";
  doc["job"] = {{"id", report.job}, {"database", report.database}, {"processes", report.processes.size()}};
  doc["ranks"] = nlohmann::ordered_json::array();
  for (const auto& p : report.processes) {
    doc["ranks"].push_back({{"rank", rank_json(p.rank)},
                            {"local_rank", rank_json(p.local_rank)},
                            {"world_size", rank_json(p.world_size)},
                            {"pid", p.pid},
                            {"host", p.host},
                            {"command", p.command},
                            {"ended", p.ended},
                            {"python_version", p.python_version.empty() ? nlohmann::ordered_json(nullptr)
                                                                        : nlohmann::ordered_json(p.python_version)},
                            {"python_stacks_unavailable", p.python_stacks_unavailable.empty()
                                                              ? nlohmann::ordered_json(nullptr)
                                                              : nlohmann::ordered_json(p.python_stacks_unavailable)},
                            {"events", p.events},
                            {"copies", copies_json(p.copies)},
                            {"syncs", syncs_json(p.api_waits)},
                            {"collectives", collectives_json(p.collectives)},
                            {"dropped_events", p.lost.total()},
                            {"lost", lost_json(p.lost)},
                            {"steps", {{"count", p.sync_sites.steps.count},
                                       {"rule", p.sync_sites.steps.rule},
                                       {"step_ns", p.sync_sites.steps.step_ns},
                                       {"span_ns", p.sync_sites.span_ns}}},
                            {"hidden_syncs", sites_json(p.sync_sites.hidden, p.sync_sites)},
                            {"explicit_syncs", sites_json(p.sync_sites.explicit_, p.sync_sites)},
                            {"pageable_sites", sites_json(p.sync_sites.pageable_copies, p.sync_sites)},
                            {"polls", sites_json(p.sync_sites.polls, p.sync_sites)}});
  }
  doc["totals"] = {{"copies", copies_json(report.total_copies)},
                   {"syncs", syncs_json(report.total_syncs)},
                   {"collectives", collectives_json(report.total_collectives)},
                   {"dropped_events", report.total_lost.total()}};
  {
    const WaitReport& w = report.waits;
    const CollectiveAnalysis& a = w.analysis;
    auto ranks = nlohmann::ordered_json::array();
    for (const RankWaits& r : a.ranks) {
      const int64_t steps = steps_of_rank(report, r.rank);
      ranks.push_back({{"rank", r.rank},
                       {"collectives", r.collectives},
                       {"waited_ns", r.waited_ns},
                       {"per_step_ns", steps ? nlohmann::ordered_json(r.waited_ns / steps) : nullptr},
                       {"last_count", r.last_count},
                       {"last_fraction", r.collectives ? double(r.last_count) / double(r.collectives) : 0.0},
                       {"imposed_ns", r.imposed_ns}});
    }
    nlohmann::ordered_json straggler = nullptr;
    if (a.straggler >= 0) {
      auto activity = nlohmann::ordered_json::array();
      for (const auto& h : w.straggler_host)
        activity.push_back({{"file", h.file}, {"line", h.line}, {"function", h.function}, {"share", h.share}});
      int64_t imposed = 0;
      for (const RankWaits& r : a.ranks)
        if (r.rank == a.straggler) imposed = r.imposed_ns;
      const int64_t steps = steps_of_rank(report, a.straggler);
      straggler = {{"rank", a.straggler},
                   {"imposed_ns", imposed},
                   {"imposed_per_step_ns", steps ? nlohmann::ordered_json(imposed / steps) : nullptr},
                   {"host_activity", activity}};
    }
    auto captured = nlohmann::ordered_json::array();
    for (const CapturedCollectives& c : w.captured)
      captured.push_back({{"communicator", fmt::format("{:016x}", c.communicator)},
                          {"collectives", c.collectives},
                          {"ranks", c.ranks},
                          {"replays_measured", false}});
    doc["collective_waits"] = {{"matched", a.matched},
                               {"incomplete", a.incomplete},
                               {"communicators", a.communicators},
                               {"inconsistent", a.inconsistent},
                               {"duplicates", a.duplicates},
                               {"untimed", untimed_json(w)},
                               {"captured", captured},
                               {"p2p", {{"sends", w.p2p.sends},
                                        {"recvs", w.p2p.recvs},
                                        {"matched", w.p2p.matched},
                                        {"unmatched", w.p2p.unmatched},
                                        {"timed", w.p2p.timed},
                                        {"gpu_ns", w.p2p.gpu_ns},
                                        {"exchanges", w.p2p.exchanges}}},
                               {"ranks", ranks},
                               {"straggler", straggler}};
  }
  doc["hangs"] = nlohmann::ordered_json::array();
  for (const HangRow& h : report.hangs)
    doc["hangs"].push_back({{"communicator", h.communicator},
                            {"sequence", h.sequence},
                            {"op", h.op},
                            {"waiting_ranks", h.waiting},
                            {"missing_ranks", h.missing},
                            {"waited_ns", h.waited_ns},
                            {"message", h.message}});
  doc["findings"] = nlohmann::ordered_json::array();
  for (const auto& f : report.findings)
    doc["findings"].push_back({{"kind", f.kind}, {"rank", rank_json(f.rank)}, {"calls", f.calls}, {"bytes", f.bytes},
                               {"cost_ns", f.cost_ns}, {"message", f.message}, {"advice", f.advice}});
  return doc;
}

}  // namespace trainshim::cli
