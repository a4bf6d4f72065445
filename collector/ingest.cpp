#include "ingest.hpp"

#include <algorithm>

namespace trainshim::collector {

namespace {

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

inline uint64_t hash(const CallKey& k) {
  const uint64_t a = uint64_t(k.api) | uint64_t(k.direction) << 16 | uint64_t(k.host_memory) << 24 |
                     uint64_t(k.null_object) << 32 | uint64_t(k.follows_copy) << 40;
  const uint64_t b = uint64_t(k.native_stack) | uint64_t(k.python_stack) << 32;
  return mix(a * 0x9e3779b97f4a7c15ULL ^ b);
}

constexpr uint64_t kInitialSlots = 1024;

}  // namespace

CallTable::CallTable() : slots_(kInitialSlots), mask_(kInitialSlots - 1) {}

CallTotals& CallTable::at(const CallKey& key) {
  // A loop calls from one site again and again: its key is usually the last one's.
  if (last_ < slots_.size() && slots_[last_].key == key) return slots_[last_].totals;
  for (uint64_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.used && s.key == key) {
      last_ = i;
      return s.totals;
    }
    if (!s.used) {
      // At most half full: probes stay short.
      if ((used_.size() + 1) * 2 > slots_.size()) {
        grow();
        return at(key);
      }
      s.used = true;
      s.key = key;
      used_.push_back(uint32_t(i));
      last_ = i;
      return s.totals;
    }
  }
}

void CallTable::grow() {
  std::vector<Slot> old;
  old.swap(slots_);
  std::vector<uint32_t> order;
  order.swap(used_);
  slots_.assign(old.size() * 2, Slot{});
  mask_ = slots_.size() - 1;
  last_ = kNoSlot;
  for (uint32_t i : order) at(old[i].key) = old[i].totals;
}

void CallTable::clear() {
  for (uint32_t i : used_) slots_[i] = Slot{};
  used_.clear();
  last_ = kNoSlot;
}

GpuTiming gpu_timing_of(const EventRecord& timing) {
  return {timing.detail, timing.flags, (timing.flags & kExchange) ? timing.sequence : 0};
}

bool TimingFolder::timable(const EventRecord& call) {
  return kApis[call.api].api_class == ApiClass::Collective && (call.flags & (kUntimedCapturing | kUntimedNoEvent)) == 0;
}

std::size_t TimingFolder::KeyHash::operator()(const Key& k) const {
  return mix(k.object * 0x9e3779b97f4a7c15ULL ^ mix(k.stream) ^ (uint64_t(k.sequence_or_peer) << 8 | k.kind));
}

TimingFolder::Key TimingFolder::key_of(const EventRecord& r) {
  const uint32_t kind = r.flags & (kPointToPoint | kSend);
  return {r.object, r.stream, (kind & kPointToPoint) ? r.peer : r.sequence, kind};
}

template <class Pairs>
TimingFolder::Map::iterator TimingFolder::nearest(Map& map, const Key& key, uint64_t begin_ns, const Pairs& pairs) {
  auto [it, end] = map.equal_range(key);
  auto best = map.end();
  uint64_t best_distance = 0;
  for (; it != end; ++it) {
    const Entry& e = it->second;
    if (!pairs(e)) continue;
    const uint64_t distance = e.begin_ns > begin_ns ? e.begin_ns - begin_ns : begin_ns - e.begin_ns;
    if (best == map.end() || distance < best_distance || (distance == best_distance && e.order < best->second.order)) {
      best = it;
      best_distance = distance;
    }
  }
  return best;
}

void TimingFolder::add(Map& map, std::deque<std::pair<Key, uint64_t>>& order, const Key& key, Entry entry, bool early) {
  if (order.size() == kMaxAwaitedTimings) {
    const auto [old_key, old_order] = order.front();
    order.pop_front();
    auto [it, end] = map.equal_range(old_key);
    for (; it != end; ++it)
      if (it->second.order == old_order) {
        if (early) dropped_early_.push_back(it->second.row);
        map.erase(it);
        break;
      }
  }
  entry.order = next_order_++;
  order.emplace_back(key, entry.order);
  map.emplace(key, entry);
}

void TimingFolder::await(const EventRecord& call, uint64_t begin_ns, int64_t row) {
  add(awaiting_, awaiting_order_, key_of(call), {call.sequence, begin_ns, row, 0, {}}, false);
}

std::optional<int64_t> TimingFolder::take_collective(const EventRecord& timing, uint64_t begin_ns) {
  // An exchange's timing carries the exchange's number: it pairs with its operation's first call
  // whatever that call's number among its peer's calls.
  const bool exchange = (timing.flags & kExchange) != 0;
  const auto it = nearest(awaiting_, key_of(timing), begin_ns,
                          [&](const Entry& e) { return exchange || e.sequence == timing.sequence; });
  if (it == awaiting_.end()) return std::nullopt;
  const int64_t row = it->second.row;
  awaiting_.erase(it);
  return row;
}

void TimingFolder::hold_early(const EventRecord& timing, uint64_t begin_ns, int64_t row) {
  add(early_, early_order_, key_of(timing), {timing.sequence, begin_ns, row, 0, gpu_timing_of(timing)}, true);
}

std::optional<TimingFolder::Early> TimingFolder::take_early(const EventRecord& call, uint64_t begin_ns) {
  const auto it = nearest(early_, key_of(call), begin_ns, [&](const Entry& e) {
    return (e.timing.flags & kExchange) != 0 || e.sequence == call.sequence;
  });
  if (it == early_.end()) return std::nullopt;
  const Early found{it->second.row, it->second.timing};
  early_.erase(it);
  return found;
}

std::vector<int64_t> TimingFolder::take_dropped_early() {
  std::vector<int64_t> rows;
  rows.swap(dropped_early_);
  return rows;
}

std::vector<int64_t> TimingFolder::clear() {
  std::vector<int64_t> rows = take_dropped_early();
  for (const auto& [key, e] : early_) rows.push_back(e.row);
  awaiting_.clear();
  early_.clear();
  awaiting_order_.clear();
  early_order_.clear();
  return rows;
}

SampleRow sample_row(const EventRecord& r, uint64_t at_ns) {
  const char letter = sample_state(r);
  const bool is_letter = (letter >= 'A' && letter <= 'Z') || (letter >= 'a' && letter <= 'z');
  return {r.tid, at_ns, sample_tick(r), is_letter ? letter : char(0), sample_syscall(r), r.python_stack};
}

void Census::add(const ProcessCensus& c) {
  latest = c;
  threads_max = std::max(threads_max, c.threads);
  workers_max = std::max(workers_max, c.workers_alive);
}

std::vector<std::pair<std::string_view, uint64_t>> Census::facts() const {
  const uint64_t values[] = {latest.threads,      threads_max,           latest.workers_alive, workers_max,
                             latest.workers_seen, latest.workers_cpu_ns, latest.other_children};
  static_assert(std::size(values) == std::size(kCensusKeys));
  std::vector<std::pair<std::string_view, uint64_t>> facts;
  for (std::size_t i = 0; i < std::size(values); ++i) facts.emplace_back(kCensusKeys[i], values[i]);
  return facts;
}

void ProcessIngest::restore_thread_now(uint32_t tid, const ThreadNow& now) {
  if (threads_now_.size() < kMostSampledThreads || threads_now_.count(tid)) threads_now_[tid] = now;
}

ProcessIngest::Thread& ProcessIngest::thread(uint32_t tid) {
  if (cached_thread_ && cached_tid_ == tid) return *cached_thread_;
  cached_tid_ = tid;
  cached_thread_ = &threads_[tid];  // references into an unordered_map stay valid
  return *cached_thread_;
}

ApiClass ProcessIngest::add(const EventRecord& r, uint64_t begin_ns, uint64_t end_ns) {
  const ApiClass api_class = kApis[r.api].api_class;
  ++stored_;
  CallKey key{r.api,          Direction(r.direction), HostMemory(r.host_memory), r.object == 0, Direction::None,
              r.native_stack, r.python_stack};
  if (takes_part_in_copy_pairing(api_class)) {
    Thread& t = thread(r.tid);
    key.follows_copy = follow_copy(t.pairing, api_class, r.stream, key.direction);
    // The shim takes a thread's poll stacks only now and then: the others were made from where
    // the last sampled one was.
    if (api_class == ApiClass::Poll) {
      if (key.native_stack == 0 && key.python_stack == 0) {
        key.native_stack = t.poll_native;
        key.python_stack = t.poll_python;
      } else {
        t.poll_native = key.native_stack;
        t.poll_python = key.python_stack;
      }
    }
  }
  CallTotals& totals = calls_.at(key);
  const uint64_t duration = end_ns - begin_ns;
  totals.count += 1;
  totals.bytes += r.bytes;
  totals.total_ns += duration;
  if (duration > totals.max_ns) totals.max_ns = duration;
  if (begin_ns < totals.first_begin_ns) totals.first_begin_ns = begin_ns;
  if (end_ns > totals.last_end_ns) totals.last_end_ns = end_ns;

  // The sampler's records say what the process's threads were doing, not something they did.
  if (api_class == ApiClass::Sample) {
    const SampleRow row = sample_row(r, begin_ns);
    if (sample_rows_kept_ < sample_rows_) {
      samples_.push_back(row);
      ++sample_rows_kept_;
    } else {
      ++samples_not_kept_;
    }
    auto it = threads_now_.find(row.tid);
    if (it == threads_now_.end()) {
      if (threads_now_.size() >= kMostSampledThreads) return api_class;
      it = threads_now_.emplace(row.tid, ThreadNow{}).first;
      it->second.since_ns = row.at_ns;
    } else if (row.at_ns < it->second.at_ns) {
      return api_class;  // read out of order (another ring): it says nothing newer
    } else if (!it->second.same_as(row)) {
      it->second.since_ns = row.at_ns;
    }
    ThreadNow& now = it->second;
    if (!now.written_pending) {
      now.written_pending = true;
      threads_sampled_.push_back(row.tid);
    }
    now.at_ns = row.at_ns;
    now.python_stack = row.python_stack;
    now.state = row.state;
    now.syscall = row.syscall;
    return api_class;
  }
  if (api_class == ApiClass::ProcessSample) {
    census_.add(process_census(r));
    census_changed_ = true;
    return api_class;
  }
  // The timeline's edges are kept (the report's windows) but are nothing the process did: a hung
  // job's duty cycle goes on.
  if (api_class == ApiClass::GpuWindow) {
    kept_.push_back({r, begin_ns, end_ns, Direction::None});
    return api_class;
  }
  last_record_ns_ = std::max(last_record_ns_, end_ns);

  // The GPU's own activity is not something the process's host was doing.
  if (is_gpu_activity(api_class)) {
    if (gpu_rows_kept_ < gpu_rows_) {
      gpu_.push_back({r, begin_ns, end_ns, Direction::None});
      ++gpu_rows_kept_;
    } else {
      ++gpu_not_kept_;
    }
    return api_class;
  }
  if (api_class != ApiClass::CollectiveTiming) last_activity_ = {r.api, r.python_stack, r.rank_in_comm, begin_ns, true};

  // A copy with stacks (a host sync, or pageable memory) is kept: the GPU's idle gaps are told
  // apart by the copies the host made in them (an input batch's upload).
  const bool copy_without_stacks = api_class == ApiClass::Copy && r.native_stack == 0 && r.python_stack == 0;
  if (copy_without_stacks || api_class == ApiClass::Poll) {
    recent_.push({r, begin_ns, end_ns, key.follows_copy});
  } else {
    kept_.push_back({r, begin_ns, end_ns, key.follows_copy});
  }
  return api_class;
}

void ProcessIngest::clear_pass() {
  calls_.clear();
  kept_.clear();
  gpu_.clear();
  gpu_not_kept_ = 0;
  samples_.clear();
  samples_not_kept_ = 0;
  for (uint32_t tid : threads_sampled_) threads_now_[tid].written_pending = false;
  threads_sampled_.clear();
  census_changed_ = false;
  stored_ = 0;
}

}  // namespace trainshim::collector
