#include "hang_watch.hpp"

#include <fmt/format.h>

namespace trainshim::collector {

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  // Appended piece by piece: GCC 12 at -O2 and above warns (-Wrestrict, falsely) about
  // `const char* + std::string&&` inlined here.
  for (int r : ranks) {
    if (!out.empty()) out += ',';
    out += std::to_string(r);
  }
  return out;
}

void HangWatch::observe(int rank, const EventRecord& r, int64_t begin_ns, const std::string& where) {
  const ApiInfo& info = kApis[r.api];
  const bool collective = info.api_class == ApiClass::Collective;
  const bool timing = info.api_class == ApiClass::CollectiveTiming;
  const int who = rank >= 0 ? rank : int(r.rank_in_comm);
  if (!timing) last_[who] = {std::string(info.name), where, begin_ns};
  if (info.api_class == ApiClass::GroupEnd) {
    // The group's collectives were recorded before its end said whether they would be timed.
    for (auto& [id, c] : communicators_)
      for (auto& [local, m] : c.members)
        if (m.rank == who && m.entered_in_group) {
          m.entered_in_group = false;
          if (r.flags & (kGroupInProgress | kGroupSimulated)) m.entered_timed = false;
        }
    return;
  }
  // Point-to-point calls are numbered per peer: they are no step of the communicator's sequence.
  if ((!collective && !timing) || r.sequence == 0 || r.comm_size == 0 || (r.flags & kPointToPoint)) return;
  Communicator& c = communicators_[comm_id(r)];
  c.size = r.comm_size;
  Member& m = c.members[r.rank_in_comm];
  m.rank = who;
  if (timing) {
    m.finished = std::max(m.finished, r.sequence);
    if (r.flags & kGroupInProgress) m.waits_for_launches = true;
    return;
  }
  if (r.sequence >= m.entered) {
    m.entered = r.sequence;
    const uint32_t untimed = r.flags & kUntimedFlags;
    m.entered_timed = untimed == 0 || (untimed == kGroupInProgress && m.waits_for_launches);
    m.entered_in_group = (r.flags & kInGroup) != 0;
  }
  if (r.sequence > c.newest) {
    c.newest = r.sequence;
    c.newest_since_ns = begin_ns;
    c.newest_op = std::string(info.name);
  }
}

void HangWatch::note_activity(int who, std::string_view api, const std::string& where, int64_t at_ns) {
  last_[who] = {std::string(api), where, at_ns};
}

std::vector<Hang> HangWatch::check(int64_t now_ns) {
  std::vector<Hang> hangs;
  for (auto& [id, c] : communicators_) {
    if (c.newest == 0 || now_ns - c.newest_since_ns < threshold_ns_) continue;
    Hang h;
    h.communicator = id;
    h.sequence = c.newest;
    h.op = c.newest_op;
    h.waited_ns = now_ns - c.newest_since_ns;
    // The members seen, in rank order; the others of the communicator are only counted (its size
    // comes from a record: never one entry per rank).
    uint64_t unseen = c.size;
    for (const auto& [member, m] : c.members) {
      if (member >= c.size) continue;
      --unseen;
      if (m.entered < c.newest) {
        h.missing.push_back(m.rank);
      } else if (m.entered_timed && m.finished < c.newest && m.finished > 0) {
        // Only a member whose collectives are timed tells waiting apart from not yet timed, and
        // only for a collective that will be timed.
        h.waiting.push_back(m.rank);
      }
    }
    // Finished on every rank that entered it, or nobody is missing here: not a hang this node sees.
    if (h.waiting.empty() || (h.missing.empty() && unseen == 0)) continue;
    h.message = fmt::format("{} #{} on communicator {:016x}: rank{} {} waiting for {:.0f} s", h.op, h.sequence, id,
                            h.waiting.size() == 1 ? "" : "s", rank_list(h.waiting), double(h.waited_ns) / 1e9);
    if (!h.missing.empty())
      h.message += fmt::format("; rank{} {} never entered it", h.missing.size() == 1 ? "" : "s", rank_list(h.missing));
    if (unseen != 0)
      h.message += fmt::format("; {} rank{} of the communicator not seen on this node", unseen, unseen == 1 ? "" : "s");
    for (int rank : h.missing) {
      const auto last = last_.find(rank);
      if (last == last_.end()) continue;
      h.message += fmt::format("; rank {}'s last activity: {}{}{}, {:.0f} s ago", rank, last->second.api,
                               last->second.where.empty() ? "" : " at ", last->second.where,
                               double(now_ns - last->second.at_ns) / 1e9);
    }
    h.fresh = c.reported != c.newest;
    c.reported = c.newest;
    hangs.push_back(std::move(h));
  }
  return hangs;
}

}  // namespace trainshim::collector
