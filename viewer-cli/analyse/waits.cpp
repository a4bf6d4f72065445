#include "analyse/waits.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "analyse/classifier.hpp"
#include "analyse/syncs.hpp"
#include "store/call_rows.hpp"
#include "store/rows.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::cli {

namespace {

// The window before a late collective in which the straggler's host was making others wait,
// widened a little: its calls at the very start of the late work still count.
constexpr double kWindowMargin = 1.1;
constexpr std::size_t kMaxWindows = 2000;

// The key of a communicator's exchanges in the analysis: apart from its collectives' numbers.
uint64_t exchange_series(uint64_t comm) { return (comm ^ 0x65786368616e6765ULL) * 0x9e3779b97f4a7c15ULL; }

std::vector<HostActivity> host_activity(const ProcessCollectives& p, const std::vector<LateCollective>& late) {
  // Its recorded calls with a Python stack, in begin order: the waits and NCCL calls kept one by one
  // and the recent copies and polls. The collectives themselves are where the others waited, not
  // what kept this host busy.
  std::vector<std::pair<int64_t, int64_t>> calls;  // begin_ns, python stack
  for (const StackedCallRow& call : read_stacked_calls(*p.db, p.process_id))
    calls.emplace_back(call.begin_ns, call.python_stack);

  std::map<std::tuple<std::string, int, std::string>, int64_t> counts;
  std::unordered_map<int64_t, std::tuple<std::string, int, std::string>> top_frame;  // by python stack id
  int64_t total = 0;
  const std::size_t first = late.size() > kMaxWindows ? late.size() - kMaxWindows : 0;
  for (std::size_t i = first; i < late.size(); ++i) {
    const int64_t end = late[i].host_begin_ns;
    const int64_t begin = end - int64_t(double(late[i].lateness_ns) * kWindowMargin);
    auto call =
        std::lower_bound(calls.begin(), calls.end(), std::make_pair(begin, std::numeric_limits<int64_t>::min()));
    for (; call != calls.end() && call->first < end; ++call) {
      const int64_t stack = call->second;
      auto [it, fresh] = top_frame.try_emplace(stack);
      if (fresh) {
        const std::vector<PythonFrameView> frames = read_python_stack(*p.db, p.process_id, stack);
        if (const int top = top_user_python_frame(frames); top >= 0)
          it->second = {frames[std::size_t(top)].file, frames[std::size_t(top)].line,
                        frames[std::size_t(top)].function};
      }
      if (std::get<0>(it->second).empty()) continue;
      ++counts[it->second];
      ++total;
    }
  }
  std::vector<HostActivity> out;
  for (const auto& [where, n] : counts)
    out.push_back({std::get<0>(where), std::get<2>(where), std::get<1>(where), double(n) / double(total)});
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.share > b.share; });
  return out;
}

// Calls by their begins; equal begins keep the order of the calls' APIs, as the index would give them.
std::vector<CollectiveCall> in_call_order(std::vector<std::pair<int64_t, CollectiveCall>>& list) {
  std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first, a.second.api) < std::tie(b.first, b.second.api);
  });
  std::vector<CollectiveCall> sequence;
  sequence.reserve(list.size());
  for (const auto& [begin, call] : list) sequence.push_back(call);
  return sequence;
}

}  // namespace

double CommunicatorCollective::message_bytes() const {
  const bool per_rank_count =
      op == "all_gather" || op == "reduce_scatter" || op == "allto_all" || op == "gather" || op == "scatter";
  return double(timed_bytes) * (per_rank_count ? double(std::max(comm_size, 1u)) : 1.0);
}

double CommunicatorCollective::algorithm_bandwidth() const {
  return gpu_ns > 0 ? message_bytes() / (double(gpu_ns) / 1e9) : 0;
}

double CommunicatorCollective::bus_bandwidth() const {
  const double n = double(std::max(comm_size, 1u));
  if (op == "all_reduce") return algorithm_bandwidth() * 2 * (n - 1) / n;
  if (op == "broadcast" || op == "bcast" || op == "reduce") return algorithm_bandwidth();
  return algorithm_bandwidth() * (n - 1) / n;
}

std::map<int64_t, CollectiveCalls> load_collective_calls(const RunDatabase& db, const std::map<int64_t, int>& ranks) {
  std::map<int64_t, CollectiveCalls> out;
  std::map<int64_t, std::vector<std::pair<int64_t, CollectiveCall>>> calls;  // by process: begin_ns, call
  for (const auto& [process_id, rank] : ranks) {
    out[process_id];
    calls[process_id];
  }
  // One pass for every process of the database, unsorted: a sort here is faster than SQLite's
  // sorter.
  CollectiveCalls* process = nullptr;
  std::vector<std::pair<int64_t, CollectiveCall>>* process_calls = nullptr;
  int64_t current = -1;
  int rank = -1;
  for_each_collective_event(db, [&](const CollectiveEventRow& row) {
    if (row.process_id != current || !process) {
      const auto found = ranks.find(row.process_id);
      if (found == ranks.end()) return;
      current = row.process_id;
      rank = found->second;
      process = &out[row.process_id];
      process_calls = &calls[row.process_id];
    }
    CollectiveCalls& c = *process;
    const int64_t flags = row.flags;
    const auto communicator = uint64_t(row.communicator);
    const auto rank_in_comm = uint32_t(row.rank_in_comm), sequence = uint32_t(row.sequence);
    process_calls->emplace_back(row.begin_ns, CollectiveCall{row.api, row.bytes, row.begin_ns});
    if ((flags & (kGroupInProgress | kInGroup)) == kGroupInProgress) ++c.launched_in_progress;
    if (flags & kUntimedCapturing) ++c.captured[communicator];
    if (flags & kPointToPoint) {
      const bool send = (flags & kSend) != 0;
      ++(send ? c.p2p_calls.sends : c.p2p_calls.recvs);
      (send ? c.p2p_calls.send_bytes : c.p2p_calls.recv_bytes) += row.bytes;
      if (sequence > 0) c.p2p.push_back({communicator, rank_in_comm, uint32_t(row.peer), sequence, send});
    }
    CommunicatorCollective* totals = nullptr;
    if (!(flags & kPointToPoint)) {
      totals = &c.by_communicator[{communicator, row.api}];
      if (totals->calls == 0) totals->op = collective_op_name(db.vocabulary().api(row.api).name);
      totals->communicator = communicator;
      totals->comm_size = uint32_t(row.comm_size);
      ++totals->calls;
    }
    if (!row.gpu_ns) return;
    const int64_t gpu_ns = *row.gpu_ns;
    if (totals) {
      ++totals->timed;
      totals->timed_bytes += row.bytes;
      totals->gpu_ns += gpu_ns;
    }
    if (flags & kGroupInProgress) ++c.timed_in_progress;
    // Point-to-point timings cover a group's point-to-point work, not one collective; an exchange
    // with every rank of the communicator (all_to_all) is matched as a collective of its own series.
    uint64_t series = communicator;
    uint32_t number = sequence;
    if (flags & kPointToPoint) {
      ++c.p2p_calls.timed;
      c.p2p_calls.gpu_ns += gpu_ns;
      if (!(flags & kExchange)) return;
      ++c.exchanges;
      series = exchange_series(communicator);
      number = uint32_t(row.exchange);
    }
    c.timings.push_back(
        {rank >= 0 ? rank : int32_t(rank_in_comm), series, uint32_t(row.comm_size), number, gpu_ns, row.begin_ns});
  });
  for (auto& [process_id, list] : calls) out[process_id].sequence = in_call_order(list);
  return out;
}

std::vector<CollectiveCall> load_collective_sequence(const RunDatabase& db, int64_t process_id) {
  std::vector<std::pair<int64_t, CollectiveCall>> list;
  for_each_collective_event(db, process_id, [&](const CollectiveEventRow& row) {
    list.emplace_back(row.begin_ns, CollectiveCall{row.api, row.bytes, row.begin_ns});
  });
  return in_call_order(list);
}

nlohmann::ordered_json untimed_json(const WaitReport& waits) {
  nlohmann::ordered_json untimed = untimed_json(waits.untimed);
  untimed["in_group_in_progress"] = waits.untimed_in_group_in_progress;
  return untimed;
}

WaitReport load_waits(std::vector<ProcessCollectives>& processes) {
  WaitReport out;
  // Every rank's timings in one allocation: grown rank by rank, 10 M timings (1,024 ranks) cost
  // more in copies of the doublings than the analysis, and twice the memory at the last one.
  std::vector<CollectiveTiming> timings;
  std::size_t expected = 0;
  for (const ProcessCollectives& p : processes) expected += p.collectives.timings.size();
  timings.reserve(expected);
  std::map<uint64_t, CapturedCollectives> captured;
  // Point-to-point calls by (communicator, sender, receiver, n): 1 = send seen, 2 = receive seen.
  std::map<std::tuple<uint64_t, uint32_t, uint32_t, uint32_t>, int> pairs;
  for (ProcessCollectives& p : processes) {
    CollectiveCalls& c = p.collectives;
    timings.insert(timings.end(), c.timings.begin(), c.timings.end());
    std::vector<CollectiveTiming>().swap(c.timings);
    out.p2p.timed += c.p2p_calls.timed;
    out.p2p.gpu_ns += c.p2p_calls.gpu_ns;
    out.p2p.exchanges += c.exchanges;
    out.untimed += read_untimed_collectives(*p.db, p.process_id);
    // Operations launched on NCCL's thread: calls outside a group and operations of groups whose
    // end returned ncclInProgress, less those timed once the program waited for the launch.
    const int64_t launched =
        read_operations_in_groups_in_progress(*p.db, p.process_id, kGroupInProgress) + c.launched_in_progress;
    out.launched_in_progress += launched;
    out.untimed_in_group_in_progress += launched - c.timed_in_progress;
    for (const auto& [communicator, n] : c.captured) {
      CapturedCollectives& cc = captured[communicator];
      cc.communicator = communicator;
      cc.collectives = std::max(cc.collectives, n);
      ++cc.ranks;
    }
    for (const auto& call : c.p2p) {
      ++(call.send ? out.p2p.sends : out.p2p.recvs);
      pairs[{call.communicator, call.send ? call.rank_in_comm : call.peer, call.send ? call.peer : call.rank_in_comm,
             call.n}] |= call.send ? 1 : 2;
    }
  }
  for (const auto& [key, seen] : pairs) {
    if (seen == 3) ++out.p2p.matched;
    else ++out.p2p.unmatched;
  }
  for (const auto& [id, c] : captured) out.captured.push_back(c);
  std::map<int32_t, std::span<const int64_t>> step_starts;
  for (const ProcessCollectives& p : processes)
    if (p.rank >= 0 && !p.step_starts_ns.empty()) step_starts.emplace(p.rank, p.step_starts_ns);
  out.analysis = analyze_collectives(timings, step_starts);
  if (out.analysis.straggler >= 0)
    for (const ProcessCollectives& p : processes)
      if (p.rank == out.analysis.straggler) {
        out.straggler_host = host_activity(p, out.analysis.straggler_late);
        break;
      }
  return out;
}

}  // namespace trainshim::cli
