#include "analyse/collectives.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace trainshim::cli {

namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

struct Communicator {
  uint32_t size = 0;
  uint32_t members = 0;  // distinct ranks seen so far; the first `size` of them are members
};

// A (communicator, rank) pair: the rank's dense index and its bit in the communicator's pairs.
struct Member {
  uint32_t rank_index;
  uint32_t local;  // kNone: beyond the communicator's size (its records are inconsistent)
};

// One (comm, sequence) pair, 48 bytes.
struct Pair {
  uint32_t comm_index;
  uint32_t sequence;
  uint32_t count;           // distinct members seen
  uint32_t min_rank_index;  // the last to arrive: shortest duration, lowest rank on a tie
  int64_t min_ns;
  int64_t max_ns;  // the first to arrive: the longest duration
  int64_t sum_ns;
  int64_t min_host_ns;  // host_begin_ns of the last to arrive
  // Members seen, one bit each: the bits themselves up to 64 members, else the offset of the
  // first of their words in the pool.
  uint64_t bits;
};

uint64_t mix(uint64_t x) {
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  x *= 0x81dadef4bc2dd44dULL;
  x ^= x >> 33;
  return x;
}

// Open addressing (linear probing) over indices into a dense vector of pairs, in first-seen order.
class PairTable {
 public:
  PairTable() { rehash(1024); }

  // The pair's index; `inserted` says whether it was created (with only the key set).
  uint32_t find_or_insert(uint32_t comm_index, uint32_t sequence, bool& inserted) {
    std::size_t slot = home(comm_index, sequence);
    while (uint32_t at = slots_[slot]) {
      const Pair& p = pairs_[at - 1];
      if (p.comm_index == comm_index && p.sequence == sequence) {
        inserted = false;
        return at - 1;
      }
      slot = (slot + 1) & mask_;
    }
    if (pairs_.size() >= kNone - 1) throw std::length_error("too many (communicator, sequence) pairs");
    inserted = true;
    pairs_.push_back(Pair{comm_index, sequence, 0, 0, 0, 0, 0, 0, 0});
    const auto index = static_cast<uint32_t>(pairs_.size() - 1);
    slots_[slot] = index + 1;
    if (pairs_.size() * 2 > slots_.size()) rehash(slots_.size() * 2);
    return index;
  }

  uint32_t find(uint32_t comm_index, uint32_t sequence) const {
    std::size_t slot = home(comm_index, sequence);
    while (uint32_t at = slots_[slot]) {
      const Pair& p = pairs_[at - 1];
      if (p.comm_index == comm_index && p.sequence == sequence) return at - 1;
      slot = (slot + 1) & mask_;
    }
    return kNone;
  }

  std::vector<Pair>& pairs() { return pairs_; }

 private:
  std::size_t home(uint32_t comm_index, uint32_t sequence) const {
    return mix(uint64_t(comm_index) << 32 | sequence) & mask_;
  }

  void rehash(std::size_t capacity) {
    slots_.assign(capacity, 0);
    mask_ = capacity - 1;
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      std::size_t slot = home(pairs_[i].comm_index, pairs_[i].sequence);
      while (slots_[slot]) slot = (slot + 1) & mask_;
      slots_[slot] = static_cast<uint32_t>(i + 1);
    }
  }

  std::vector<uint32_t> slots_;  // 0: empty, else pair index + 1
  std::vector<Pair> pairs_;
  std::size_t mask_ = 0;
};

struct Resolved {
  uint32_t comm_index;
  uint32_t comm_size;
  uint32_t rank_index;
  uint32_t local;
};

// Communicators, ranks and members, each looked up once per record (the last one is cached: a
// rank's records usually come together).
class Directory {
 public:
  // False for an inconsistent record. `create`: first pass, members are added as they come; the
  // second pass sees the same records and resolves them the same way.
  bool resolve(const CollectiveTiming& t, bool create, Resolved& out) {
    if (!(cached_valid_ && t.comm == cached_comm_ && t.rank == cached_rank_)) {
      if (!lookup(t, create)) return false;
    }
    if (t.comm_size != cached_.comm_size || cached_.local == kNone) return false;
    out = cached_;
    return true;
  }

  std::vector<Communicator> communicators;
  std::vector<int32_t> ranks;  // global rank by dense index

 private:
  bool lookup(const CollectiveTiming& t, bool create) {
    cached_valid_ = false;
    uint32_t comm_index;
    if (auto it = comm_index_.find(t.comm); it != comm_index_.end()) {
      comm_index = it->second;
    } else {
      if (!create || t.comm_size == 0 || t.comm_size > kMaxCommunicatorSize) return false;
      comm_index = static_cast<uint32_t>(communicators.size());
      communicators.push_back({t.comm_size, 0});
      comm_index_.emplace(t.comm, comm_index);
    }
    Communicator& c = communicators[comm_index];
    const uint64_t member_key = uint64_t(comm_index) << 32 | uint32_t(t.rank);
    Member member;
    if (auto it = members_.find(member_key); it != members_.end()) {
      member = it->second;
    } else {
      if (!create || t.comm_size != c.size) return false;  // a consistent record makes it a member
      uint32_t rank_index;
      if (auto r = rank_index_.find(t.rank); r != rank_index_.end()) {
        rank_index = r->second;
      } else {
        rank_index = static_cast<uint32_t>(ranks.size());
        ranks.push_back(t.rank);
        rank_index_.emplace(t.rank, rank_index);
      }
      member = {rank_index, c.members < c.size ? c.members++ : kNone};
      members_.emplace(member_key, member);
    }
    cached_ = {comm_index, c.size, member.rank_index, member.local};
    cached_comm_ = t.comm;
    cached_rank_ = t.rank;
    cached_valid_ = true;
    return true;
  }

  std::unordered_map<uint64_t, uint32_t> comm_index_;
  std::unordered_map<int32_t, uint32_t> rank_index_;
  std::unordered_map<uint64_t, Member> members_;
  Resolved cached_{};
  uint64_t cached_comm_ = 0;
  int32_t cached_rank_ = 0;
  bool cached_valid_ = false;
};

}  // namespace

const RankWaits* CollectiveAnalysis::waits_of(int rank) const {
  for (const RankWaits& w : ranks)
    if (w.rank == rank) return &w;
  return nullptr;
}

CollectiveAnalysis analyze_collectives(const std::vector<CollectiveTiming>& timings,
                                       const std::map<int32_t, std::span<const int64_t>>& step_starts) {
  CollectiveAnalysis out;
  Directory dir;
  PairTable table;
  std::vector<Pair>& pairs = table.pairs();
  std::vector<uint64_t> pool;  // member bits of pairs of communicators above 64 ranks

  auto bit = [&](Pair& p, uint32_t size, uint32_t local) -> std::pair<uint64_t*, uint64_t> {
    const uint64_t mask = uint64_t(1) << (local & 63);
    if (size <= 64) return {&p.bits, mask};
    return {&pool[p.bits + local / 64], mask};
  };

  // Pass 1: members of each pair, once each; the shortest duration and the sum of the durations.
  for (const CollectiveTiming& t : timings) {
    Resolved r;
    if (t.gpu_ns < 0 || !dir.resolve(t, true, r)) {
      ++out.inconsistent;
      continue;
    }
    bool inserted;
    const uint32_t index = table.find_or_insert(r.comm_index, t.sequence, inserted);
    Pair& p = pairs[index];
    if (inserted && r.comm_size > 64) {
      p.bits = pool.size();
      pool.resize(pool.size() + (r.comm_size + 63) / 64, 0);
    }
    auto [word, mask] = bit(p, r.comm_size, r.local);
    if (*word & mask) {
      ++out.duplicates;
      continue;
    }
    *word |= mask;
    p.sum_ns += t.gpu_ns;
    p.max_ns = p.count == 0 ? t.gpu_ns : std::max(p.max_ns, t.gpu_ns);
    if (p.count++ == 0 || t.gpu_ns < p.min_ns || (t.gpu_ns == p.min_ns && t.rank < dir.ranks[p.min_rank_index])) {
      p.min_ns = t.gpu_ns;
      p.min_rank_index = r.rank_index;
      p.min_host_ns = t.host_begin_ns;
    }
  }

  std::vector<RankWaits> waits(dir.ranks.size());
  std::vector<std::span<const int64_t>> starts_of(waits.size());
  for (std::size_t i = 0; i < waits.size(); ++i) {
    waits[i].rank = dir.ranks[i];
    if (const auto it = step_starts.find(dir.ranks[i]); it != step_starts.end() && it->second.size() > 1) {
      starts_of[i] = it->second;
      waits[i].waited_by_step_ns.assign(it->second.size() - 1, 0);
    }
  }
  out.communicators = static_cast<int64_t>(dir.communicators.size());

  // Each communicator's steady collectives: the later half of its sequence numbers. Its ranks
  // arrive at the first ones as they finish starting up, and the first step's lazy set-up (a
  // library's first use, memory pools, a bucket rebuild) can hold one rank for seconds once.
  std::vector<uint32_t> first_sequence(dir.communicators.size(), std::numeric_limits<uint32_t>::max());
  std::vector<uint32_t> last_sequence(dir.communicators.size(), 0);
  for (const Pair& p : pairs) {
    first_sequence[p.comm_index] = std::min(first_sequence[p.comm_index], p.sequence);
    last_sequence[p.comm_index] = std::max(last_sequence[p.comm_index], p.sequence);
  }
  auto steady = [&](const Pair& p) {
    const uint32_t first = first_sequence[p.comm_index];
    return p.sequence != first && p.sequence - first >= (last_sequence[p.comm_index] - first + 1) / 2;
  };

  // Who was last, and the wait it imposed, per matched pair; besides, what it imposed after start-up.
  auto others_mean = [&](const Pair& p, uint32_t size) { return (p.sum_ns - int64_t(size) * p.min_ns) / (size - 1); };
  // Which quarter of its communicator's steady collectives a steady pair is in (0 to 3).
  auto quarter = [&](const Pair& p) {
    const uint32_t first = first_sequence[p.comm_index], last = last_sequence[p.comm_index];
    const uint32_t steady_first = first + (last - first + 1) / 2;
    return int(uint64_t(p.sequence - steady_first) * kStragglerQuarters / (last - steady_first + 1));
  };
  std::vector<std::array<int64_t, kStragglerQuarters>> imposed_by_quarter(waits.size());
  int64_t steady_pairs = 0;
  for (const Pair& p : pairs) {
    const uint32_t size = dir.communicators[p.comm_index].size;
    if (p.count != size) {
      ++out.incomplete;
      continue;
    }
    ++out.matched;
    if (size < 2) continue;
    RankWaits& last = waits[p.min_rank_index];
    ++last.last_count;
    last.imposed_ns += others_mean(p, size);
    if (!steady(p)) continue;
    ++steady_pairs;
    last.steady_imposed_ns += others_mean(p, size);
    imposed_by_quarter[p.min_rank_index][std::size_t(quarter(p))] += others_mean(p, size);
  }
  // In how many quarters of the steady collectives rank `index` imposed the most wait.
  auto quarters_led = [&](std::size_t index) {
    int led = 0;
    for (std::size_t q = 0; q < kStragglerQuarters; ++q) {
      bool most = imposed_by_quarter[index][q] > 0;
      for (std::size_t i = 0; most && i < waits.size(); ++i)
        most = i == index || imposed_by_quarter[i][q] < imposed_by_quarter[index][q];
      led += most;
    }
    return led;
  };

  // The straggler, from the waits after start-up.
  std::size_t candidate = waits.size();
  int64_t total_imposed = 0;
  for (std::size_t i = 0; i < waits.size(); ++i) {
    const int64_t imposed = waits[i].steady_imposed_ns;
    total_imposed += imposed;
    if (candidate == waits.size() || imposed > waits[candidate].steady_imposed_ns ||
        (imposed == waits[candidate].steady_imposed_ns && waits[i].rank < waits[candidate].rank))
      candidate = i;
  }
  if (candidate < waits.size()) {
    const RankWaits& c = waits[candidate];
    const int64_t imposed = c.steady_imposed_ns;
    int64_t rival = 0;
    for (std::size_t i = 0; i < waits.size(); ++i)
      if (i != candidate) rival = std::max(rival, waits[i].steady_imposed_ns);
    const bool most = imposed > 0 && imposed >= total_imposed - imposed;
    const bool dominant = imposed >= kStragglerDominance * rival;
    const bool matters = c.last_count > 0 && imposed / c.last_count >= kStragglerMinMeanNs;
    const bool consistent = steady_pairs < int64_t(kStragglerQuarters) * kStragglerQuarterPairs ||
                            quarters_led(candidate) >= kStragglerQuartersLed;
    if (most && dominant && matters && consistent) {
      out.straggler = c.rank;
      for (const Pair& p : pairs) {
        const uint32_t size = dir.communicators[p.comm_index].size;
        if (p.count == size && size >= 2 && p.min_rank_index == candidate)
          out.straggler_late.push_back({c.rank, p.min_host_ns, others_mean(p, size)});
      }
      auto& late = out.straggler_late;
      if (late.size() > kMaxStragglerLate) {
        std::nth_element(
            late.begin(), late.begin() + kMaxStragglerLate, late.end(),
            [](const LateCollective& a, const LateCollective& b) { return a.lateness_ns > b.lateness_ns; });
        late.resize(kMaxStragglerLate);
      }
      std::sort(late.begin(), late.end(),
                [](const LateCollective& a, const LateCollective& b) { return a.host_begin_ns < b.host_begin_ns; });
    }
  }

  // Pass 2: every member's wait in the matched pairs. Each member's bit, set by pass 1, is cleared
  // by its first record, so that a repeated record finds it clear and is skipped again.
  for (const CollectiveTiming& t : timings) {
    Resolved r;
    if (t.gpu_ns < 0 || !dir.resolve(t, false, r)) continue;
    const uint32_t index = table.find(r.comm_index, t.sequence);
    if (index == kNone) continue;  // cannot happen: pass 1 added every pair of a valid record
    Pair& p = pairs[index];
    if (p.count != r.comm_size) continue;
    auto [word, mask] = bit(p, r.comm_size, r.local);
    if (!(*word & mask)) continue;
    *word &= ~mask;
    RankWaits& w = waits[r.rank_index];
    ++w.collectives;
    w.waited_ns += t.gpu_ns - p.min_ns;
    if (t.gpu_ns > p.min_ns) w.waited_for_ns[waits[p.min_rank_index].rank] += t.gpu_ns - p.min_ns;
    if (const std::span<const int64_t> starts = starts_of[r.rank_index]; !starts.empty()) {
      // Step k runs from starts[k] to starts[k + 1]; a call before the first or after the last start
      // is in no step.
      const auto after = std::upper_bound(starts.begin(), starts.end(), t.host_begin_ns);
      if (after != starts.begin() && after != starts.end())
        w.waited_by_step_ns[std::size_t(after - starts.begin() - 1)] += t.gpu_ns - p.min_ns;
    }
    // Its arrival's lateness between the first rank's (0) and the last's (1): the first to arrive
    // waits longest.
    const double lateness = p.max_ns > p.min_ns ? double(p.max_ns - t.gpu_ns) / double(p.max_ns - p.min_ns) : 0;
    w.lateness += lateness;
    if (!steady(p)) continue;
    ++w.steady_collectives;
    w.steady_waited_ns += t.gpu_ns - p.min_ns;
    w.steady_lateness += lateness;
    if (t.gpu_ns > p.min_ns) w.steady_waited_for_ns[waits[p.min_rank_index].rank] += t.gpu_ns - p.min_ns;
  }

  std::sort(waits.begin(), waits.end(), [](const RankWaits& a, const RankWaits& b) { return a.rank < b.rank; });
  out.ranks = std::move(waits);
  return out;
}

}  // namespace trainshim::cli
