#include "hang_watch.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "trainshim/syscall_names.hpp"

namespace trainshim::collector {

std::string thread_doing(const ThreadNow& t, int64_t now_ns) {
  const std::string_view state = thread_state_words(t.state);
  std::string out = state.empty() ? "in an unknown state" : std::string(state);
  if (const std::string call = syscall_words(t.syscall); !call.empty()) (out += " in ") += call;
  return out + fmt::format(" for {:.0f} s", double(std::max<int64_t>(0, now_ns - int64_t(t.since_ns))) / 1e9);
}

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
  if (info.api_class == ApiClass::CommInit) {
    // A communicator this rank got (a failed init, or a split that left it out, made none).
    const bool made = (r.result == 0 || r.result == 7) && r.object != 0;
    if (!made || r.comm_size == 0 || r.comm_size > kMaxCommSize || r.rank_in_comm >= r.comm_size) return;
    Communicator& c = communicators_[comm_id(r)];
    c.size = r.comm_size;
    c.members[r.rank_in_comm].rank = who;
    return;
  }
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
    c.hung_stacks.clear();
    c.newest_op = std::string(info.name);
  }
}

void HangWatch::note_activity(int who, std::string_view api, const std::string& where, int64_t at_ns) {
  last_[who] = {std::string(api), where, at_ns};
}

bool HangWatch::pending(const Communicator& c) {
  if (c.newest == 0) return false;
  for (const auto& [member, m] : c.members) {
    if (member >= c.size) continue;
    if (m.entered < c.newest || (m.entered_timed && m.finished > 0 && m.finished < m.entered)) return true;
  }
  return false;
}

const std::pair<const int64_t, ProcessNow>* HangWatch::sampled_rank(int rank) const {
  const std::pair<const int64_t, ProcessNow>* found = nullptr;
  // A rank restarted under the same number: its latest process.
  for (const auto& entry : processes_)
    if (entry.second.rank == rank && entry.second.main_sampled &&
        (!found || entry.second.main.at_ns >= found->second.main.at_ns))
      found = &entry;
  return found;
}

namespace {
std::string process_name(const ProcessNow& p) {
  return p.rank >= 0 ? fmt::format("rank {}", p.rank) : fmt::format("process {}", p.pid);
}
}  // namespace

std::string HangWatch::rank_doing(const std::pair<const int64_t, ProcessNow>& process, int64_t now_ns,
                                  const StackNamer& namer) {
  const ProcessNow& p = process.second;
  std::string out = process_name(p) + " main thread ";
  if (!p.main_sampled) return out + "not sampled yet";
  out += thread_doing(p.main, now_ns);
  if (namer && p.main.python_stack != 0)
    if (const std::string where = namer(process.first, p.main.python_stack).where; !where.empty())
      (out += " at ") += where;
  return out;
}

std::string HangWatch::stack_of(const std::pair<const int64_t, ProcessNow>& process, int64_t now_ns,
                                const StackNamer& namer) {
  const ProcessNow& p = process.second;
  std::string out = fmt::format("rank {} (pid {}) thread {} {}", p.rank, p.pid, p.pid, thread_doing(p.main, now_ns));
  if (namer && p.main.python_stack != 0)
    for (const std::string& frame : namer(process.first, p.main.python_stack).frames) (out += "\n    at ") += frame;
  return out;
}

std::string HangWatch::stacks_of(const std::vector<const std::pair<const int64_t, ProcessNow>*>& processes,
                                 int64_t now_ns, const StackNamer& namer) {
  std::string out;
  for (const auto* process : processes) {
    if (!process->second.main_sampled) continue;
    if (!out.empty()) out += '\n';
    out += stack_of(*process, now_ns, namer);
  }
  return out;
}

std::vector<Hang> HangWatch::check(int64_t now_ns, const StackNamer& namer) {
  std::vector<Hang> hangs = collective_hangs(now_ns, namer);
  for (Hang& h : no_progress_hang(now_ns, namer)) hangs.push_back(std::move(h));
  return hangs;
}

std::vector<Hang> HangWatch::collective_hangs(int64_t now_ns, const StackNamer& namer) {
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
      if (m.entered < c.newest) h.missing.push_back(m.rank);
    }
    for (const auto& [member, m] : c.members) {
      if (member >= c.size || m.entered < c.newest || m.finished >= c.newest) continue;
      // No collective finishes without every member: with one missing, those inside it wait,
      // timed or not. Otherwise only a member whose collectives are timed tells waiting apart
      // from not yet timed, and only for a collective that will be timed.
      if (!h.missing.empty() || (m.entered_timed && m.finished > 0)) h.waiting.push_back(m.rank);
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
      if (const auto last = last_.find(rank); last != last_.end())
        h.message += fmt::format("; rank {}'s last activity: {}{}{}, {:.0f} s ago", rank, last->second.api,
                                 last->second.where.empty() ? "" : " at ", last->second.where,
                                 double(now_ns - last->second.at_ns) / 1e9);
      if (const auto* process = sampled_rank(rank)) (h.message += "; ") += rank_doing(*process, now_ns, namer);
    }
    std::vector<int> named = h.waiting;
    named.insert(named.end(), h.missing.begin(), h.missing.end());
    std::sort(named.begin(), named.end());
    named.erase(std::unique(named.begin(), named.end()), named.end());
    // Each named rank's stack now, else the last one seen while the hang went on: a rank killed
    // (the job stopped by its user, the launcher ending the others) keeps the stack it hung in.
    for (int rank : named) {
      if (const auto* process = sampled_rank(rank)) c.hung_stacks[rank] = stack_of(*process, now_ns, namer);
      if (const auto last = c.hung_stacks.find(rank); last != c.hung_stacks.end())
        (h.stacks += h.stacks.empty() ? "" : "\n") += last->second;
    }
    h.fresh = c.reported != c.newest;
    c.reported = c.newest;
    hangs.push_back(std::move(h));
  }
  return hangs;
}

std::vector<Hang> HangWatch::no_progress_hang(int64_t now_ns, const StackNamer& namer) {
  // Progress: a record that was not the sampler's, or a change of the main thread's stack, state
  // or system call. Only a process whose sampler is on can be seen not to progress.
  std::vector<const std::pair<const int64_t, ProcessNow>*> watched;
  int64_t latest = 0;
  for (const auto& entry : processes_) {
    const ProcessNow& p = entry.second;
    if (!p.sampled) continue;
    watched.push_back(&entry);
    latest = std::max({latest, p.last_record_ns, p.main_sampled ? int64_t(p.main.since_ns) : int64_t{0}});
  }
  const bool collective_pending =
      std::any_of(communicators_.begin(), communicators_.end(), [](const auto& c) { return pending(c.second); });
  // Nothing seen yet (latest 0) is no progress either: the threshold runs from the first sample.
  if (watched.empty() || collective_pending || latest == 0 || now_ns - latest < threshold_ns_) {
    no_progress_reported_ = false;
    return {};
  }
  std::sort(watched.begin(), watched.end(), [](const auto* a, const auto* b) {
    return std::pair(a->second.rank, a->second.pid) < std::pair(b->second.rank, b->second.pid);
  });
  Hang h;
  h.kind = HangKind::NoProgress;
  h.waited_ns = now_ns - latest;
  h.message = fmt::format("no rank progressed for {:.0f} s and no collective is pending", double(h.waited_ns) / 1e9);
  const char* separator = ": ";
  for (const auto* process : watched) {
    if (process->second.rank >= 0) h.waiting.push_back(process->second.rank);
    (h.message += separator) += rank_doing(*process, now_ns, namer);
    separator = "; ";
  }
  h.stacks = stacks_of(watched, now_ns, namer);
  h.fresh = !no_progress_reported_;
  no_progress_reported_ = true;
  return {h};
}

}  // namespace trainshim::collector
