#include "ingest.hpp"

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

ProcessIngest::Thread& ProcessIngest::thread(uint32_t tid) {
  if (cached_thread_ && cached_tid_ == tid) return *cached_thread_;
  cached_tid_ = tid;
  cached_thread_ = &threads_[tid];  // references into an unordered_map stay valid
  return *cached_thread_;
}

ApiClass ProcessIngest::add(const EventRecord& r, uint64_t begin_ns, uint64_t end_ns) {
  const ApiClass api_class = kApis[r.api].api_class;
  ++stored_;
  CallKey key{r.api, Direction(r.direction), HostMemory(r.host_memory), r.object == 0, Direction::None,
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

  if (api_class != ApiClass::CollectiveTiming)
    last_activity_ = {r.api, r.python_stack, r.rank_in_comm, begin_ns, true};

  if (api_class == ApiClass::Copy || api_class == ApiClass::Poll) {
    recent_.push({r, begin_ns, end_ns, key.follows_copy});
  } else {
    kept_.push_back({r, begin_ns, end_ns, key.follows_copy});
  }
  return api_class;
}

void ProcessIngest::clear_pass() {
  calls_.clear();
  kept_.clear();
  stored_ = 0;
}

}  // namespace trainshim::collector
