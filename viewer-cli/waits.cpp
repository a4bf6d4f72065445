#include "waits.hpp"

#include <algorithm>
#include <map>
#include <tuple>

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
  std::map<std::tuple<std::string, int, std::string>, int64_t> counts;
  std::map<int64_t, std::tuple<std::string, int, std::string>> top_frame;  // by python stack id
  int64_t total = 0;
  const std::size_t first = late.size() > kMaxWindows ? late.size() - kMaxWindows : 0;
  for (std::size_t i = first; i < late.size(); ++i) {
    const int64_t end = late[i].host_begin_ns;
    const int64_t begin = end - int64_t(double(late[i].lateness_ns) * kWindowMargin);
    // The collectives themselves are where the others waited, not what kept this host busy.
    Statement q(*p.db, "SELECT e.python_stack FROM events e JOIN apis a ON a.id = e.api WHERE e.process_id = ? AND "
                       "e.begin_ns >= ? AND e.begin_ns < ? AND e.python_stack <> 0 AND a.class <> 'collective'");
    q.bind(1, p.process_id).bind(2, begin).bind(3, end);
    while (q.step()) {
      const int64_t stack = q.integer(0);
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

WaitReport load_waits(const std::vector<ProcessRef>& processes) {
  WaitReport out;
  std::vector<CollectiveTiming> timings;
  std::map<uint64_t, CapturedCollectives> captured;
  // Point-to-point calls by (communicator, sender, receiver, n): 1 = send seen, 2 = receive seen.
  std::map<std::tuple<uint64_t, uint32_t, uint32_t, uint32_t>, int> pairs;
  for (const ProcessRef& p : processes) {
    // Point-to-point timings cover a group's point-to-point work, not one collective; an exchange
    // with every rank of the communicator (all_to_all) is matched as a collective of its own series.
    Statement q(*p.db, "SELECT e.rank_in_comm, e.object, e.comm_size, e.sequence, e.detail, e.begin_ns, e.flags "
                       "FROM events e JOIN apis a ON a.id = e.api WHERE e.process_id = ? AND a.class = 'collective_timing'");
    q.bind(1, p.process_id);
    while (q.step()) {
      const int64_t flags = q.integer(6);
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
    Statement in_progress(*p.db,
                          "SELECT (SELECT coalesce(sum(e.detail), 0) FROM events e JOIN apis a ON a.id = e.api WHERE "
                          "e.process_id = ?1 AND a.class = 'group_end' AND (e.flags & ?2) <> 0) + (SELECT count(*) "
                          "FROM events e JOIN apis a ON a.id = e.api WHERE e.process_id = ?1 AND a.class = 'collective' "
                          "AND (e.flags & ?3) = ?2) - (SELECT count(*) FROM events e JOIN apis a ON a.id = e.api WHERE "
                          "e.process_id = ?1 AND a.class = 'collective_timing' AND (e.flags & ?2) <> 0)");
    in_progress.bind(1, p.process_id).bind(2, kGroupInProgress).bind(3, kGroupInProgress | kInGroup);
    if (in_progress.step()) out.untimed_in_group_in_progress += in_progress.integer(0);
    Statement graphs(*p.db, "SELECT e.object, count(*) FROM events e JOIN apis a ON a.id = e.api WHERE e.process_id = ? "
                            "AND a.class = 'collective' AND (e.flags & ?) <> 0 GROUP BY e.object");
    graphs.bind(1, p.process_id).bind(2, kUntimedCapturing);
    while (graphs.step()) {
      CapturedCollectives& c = captured[uint64_t(graphs.integer(0))];
      c.communicator = uint64_t(graphs.integer(0));
      c.collectives = std::max(c.collectives, graphs.integer(1));
      ++c.ranks;
    }
    Statement p2p(*p.db, "SELECT e.object, e.rank_in_comm, e.peer, e.sequence, e.flags FROM events e JOIN apis a "
                         "ON a.id = e.api WHERE e.process_id = ? AND a.class = 'collective' AND (e.flags & ?) <> 0 "
                         "AND e.sequence > 0");
    p2p.bind(1, p.process_id).bind(2, kPointToPoint);
    while (p2p.step()) {
      const bool send = p2p.integer(4) & kSend;
      const auto me = uint32_t(p2p.integer(1)), peer = uint32_t(p2p.integer(2));
      ++(send ? out.p2p.sends : out.p2p.recvs);
      pairs[{uint64_t(p2p.integer(0)), send ? me : peer, send ? peer : me, uint32_t(p2p.integer(3))}] |= send ? 1 : 2;
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
