#include "waits.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "classifier.hpp"
#include "syncs.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::cli {

namespace {

// The window before a late collective in which the straggler's host was making others wait,
// widened a little: its calls at the very start of the late work still count.
constexpr double kWindowMargin = 1.1;
constexpr std::size_t kMaxWindows = 2000;

// The key of a communicator's exchanges in the analysis: apart from its collectives' numbers.
uint64_t exchange_series(uint64_t comm) { return (comm ^ 0x65786368616e6765ULL) * 0x9e3779b97f4a7c15ULL; }

std::vector<HostActivity> host_activity(const ProcessRef& p, const std::vector<LateCollective>& late) {
  // Its recorded calls with a Python stack, in begin order: the waits and NCCL calls kept one by one
  // and the recent copies and polls. The collectives themselves are where the others waited, not
  // what kept this host busy.
  std::vector<std::pair<int64_t, int64_t>> calls;  // begin_ns, python stack
  Statement q(*p.db, "SELECT begin_ns, python_stack FROM events WHERE process_id = ?1 AND python_stack <> 0 AND "
                     "api NOT IN (SELECT id FROM apis WHERE class = 'collective') UNION ALL "
                     "SELECT begin_ns, python_stack FROM recent_events WHERE process_id = ?1 AND python_stack <> 0 "
                     "ORDER BY 1");
  q.bind(1, p.process_id);
  while (q.step()) calls.emplace_back(q.integer(0), q.integer(1));

  std::map<std::tuple<std::string, int, std::string>, int64_t> counts;
  std::unordered_map<int64_t, std::tuple<std::string, int, std::string>> top_frame;  // by python stack id
  int64_t total = 0;
  const std::size_t first = late.size() > kMaxWindows ? late.size() - kMaxWindows : 0;
  for (std::size_t i = first; i < late.size(); ++i) {
    const int64_t end = late[i].host_begin_ns;
    const int64_t begin = end - int64_t(double(late[i].lateness_ns) * kWindowMargin);
    auto call = std::lower_bound(calls.begin(), calls.end(), std::make_pair(begin, std::numeric_limits<int64_t>::min()));
    for (; call != calls.end() && call->first < end; ++call) {
      const int64_t stack = call->second;
      auto [it, fresh] = top_frame.try_emplace(stack);
      if (fresh) {
        const std::vector<PythonFrameView> frames = load_python_stack(*p.db, p.process_id, stack);
        if (const int top = top_user_python_frame(frames); top >= 0)
          it->second = {frames[std::size_t(top)].file, frames[std::size_t(top)].line, frames[std::size_t(top)].function};
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

}  // namespace

CollectiveCalls load_collective_calls(const RunDatabase& db, int64_t process_id) {
  CollectiveCalls out;
  Statement q(db, "SELECT api, bytes, flags, object, rank_in_comm, peer, sequence FROM events WHERE process_id = ? "
                  "AND api IN (SELECT id FROM apis WHERE class = 'collective') ORDER BY begin_ns");
  q.bind(1, process_id);
  while (q.step()) {
    const int64_t flags = q.integer(2);
    const auto communicator = uint64_t(q.integer(3));
    out.sequence.push_back({q.integer(0), q.integer(1)});
    if ((flags & (kGroupInProgress | kInGroup)) == kGroupInProgress) ++out.launched_in_progress;
    if (flags & kUntimedCapturing) ++out.captured[communicator];
    if ((flags & kPointToPoint) && q.integer(6) > 0)
      out.p2p.push_back({communicator, uint32_t(q.integer(4)), uint32_t(q.integer(5)), uint32_t(q.integer(6)),
                         (flags & kSend) != 0});
  }
  return out;
}

WaitReport load_waits(const std::vector<ProcessRef>& processes) {
  WaitReport out;
  // Every rank's timings in one allocation, counted from the index first: grown record by record,
  // 10 M timings (1,024 ranks) cost more in copies and page faults of the doublings than the
  // count, and twice the memory at the last one.
  std::vector<CollectiveTiming> timings;
  std::size_t expected = 0;
  for (const ProcessRef& p : processes) {
    Statement n(*p.db, "SELECT count(*) FROM events WHERE process_id = ? AND "
                       "api IN (SELECT id FROM apis WHERE class = 'collective_timing')");
    n.bind(1, p.process_id);
    if (n.step()) expected += std::size_t(n.integer(0));
  }
  timings.reserve(expected);
  std::map<uint64_t, CapturedCollectives> captured;
  // Point-to-point calls by (communicator, sender, receiver, n): 1 = send seen, 2 = receive seen.
  std::map<std::tuple<uint64_t, uint32_t, uint32_t, uint32_t>, int> pairs;
  for (const ProcessRef& p : processes) {
    // Point-to-point timings cover a group's point-to-point work, not one collective; an exchange
    // with every rank of the communicator (all_to_all) is matched as a collective of its own series.
    Statement q(*p.db, "SELECT rank_in_comm, object, comm_size, sequence, detail, begin_ns, flags FROM events "
                       "WHERE process_id = ? AND api IN (SELECT id FROM apis WHERE class = 'collective_timing')");
    q.bind(1, p.process_id);
    int64_t timed_in_progress = 0;
    while (q.step()) {
      const int64_t flags = q.integer(6);
      if (flags & kGroupInProgress) ++timed_in_progress;
      uint64_t comm = uint64_t(q.integer(1));
      if (flags & kPointToPoint) {
        ++out.p2p.timed;
        out.p2p.gpu_ns += q.integer(4);
        if (!(flags & kExchange)) continue;
        ++out.p2p.exchanges;
        comm = exchange_series(comm);
      }
      timings.push_back({p.rank >= 0 ? p.rank : int32_t(q.integer(0)), comm, uint32_t(q.integer(2)),
                         uint32_t(q.integer(3)), q.integer(4), q.integer(5)});
    }
    Statement untimed(*p.db, "SELECT untimed_capturing, untimed_no_event FROM processes WHERE id = ?");
    untimed.bind(1, p.process_id);
    if (untimed.step()) {
      out.untimed_capturing += untimed.integer(0);
      out.untimed_no_event += untimed.integer(1);
    }
    // Operations launched on NCCL's thread: calls outside a group and operations of groups whose
    // end returned ncclInProgress, less those timed once the program waited for the launch.
    Statement groups(*p.db, "SELECT coalesce(sum(detail), 0) FROM events WHERE process_id = ? AND "
                            "api IN (SELECT id FROM apis WHERE class = 'group_end') AND (flags & ?) <> 0");
    groups.bind(1, p.process_id).bind(2, kGroupInProgress);
    if (groups.step()) out.untimed_in_group_in_progress += groups.integer(0);
    out.untimed_in_group_in_progress += p.collectives.launched_in_progress - timed_in_progress;
    for (const auto& [communicator, n] : p.collectives.captured) {
      CapturedCollectives& c = captured[communicator];
      c.communicator = communicator;
      c.collectives = std::max(c.collectives, n);
      ++c.ranks;
    }
    for (const auto& call : p.collectives.p2p) {
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
  out.analysis = analyze_collectives(timings);
  if (out.analysis.straggler >= 0)
    for (const ProcessRef& p : processes)
      if (p.rank == out.analysis.straggler) {
        out.straggler_host = host_activity(p, out.analysis.straggler_late);
        break;
      }
  return out;
}

}  // namespace trainshim::cli
