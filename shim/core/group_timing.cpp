#include "group_timing.hpp"

#include "gpu_timing.hpp"

namespace trainshim::shim {

namespace {

constexpr int kNcclInProgress = 7;  // ncclInProgress: a non-blocking group launches on NCCL's thread
constexpr uint32_t kMaxOperations = 64;

struct Operation {
  void* stream;
  TimingToken token;
  EventRecord record;  // its first call's record: what the timing record repeats
};

struct Group {
  uint32_t count;
  uint64_t calls;
  Operation operations[kMaxOperations];
};

Group& group() {
  static thread_local Group state __attribute__((tls_model("initial-exec"))){};
  return state;
}

bool same_operation(const Operation& o, void* stream, const EventRecord& call) {
  if (o.stream != stream || o.record.object != call.object) return false;
  const bool p2p = call.flags & kPointToPoint;
  return p2p ? (o.record.flags & kPointToPoint) != 0
             : !(o.record.flags & kPointToPoint) && o.record.sequence == call.sequence;
}

}  // namespace

void group_call(SegmentHeader* header, void* stream, EventRecord& call) {
  Group& g = group();
  ++g.calls;
  call.flags |= kInGroup;
  for (uint32_t i = 0; i < g.count; ++i)
    if (same_operation(g.operations[i], stream, call)) {
      call.flags |= g.operations[i].token.untimed;
      return;
    }
  if (g.count == kMaxOperations) {
    header->untimed_no_event.fetch_add(1, std::memory_order_relaxed);
    call.flags |= kUntimedNoEvent;
    return;
  }
  Operation& o = g.operations[g.count++];
  o.stream = stream;
  // Nothing of the group is on the stream yet: the start event marks where its launch will begin.
  o.token = timing_begin(header, stream);
  call.flags |= o.token.untimed;
  o.record = call;
}

uint32_t group_finished(Recorder& recorder, int result, bool simulated, uint64_t& calls) {
  Group& g = group();
  calls = g.calls;
  uint32_t flags = 0;
  if (simulated) flags = kGroupSimulated;
  else if (result == kNcclInProgress) flags = kGroupInProgress;
  for (uint32_t i = 0; i < g.count; ++i) {
    Operation& o = g.operations[i];
    if (result == 0 && !simulated) timing_end(recorder, o.token, o.stream, o.record);
    else timing_cancel(o.token);
  }
  g.count = 0;
  g.calls = 0;
  return flags;
}

void reset_group_timing_after_fork() {
  group().count = 0;
  group().calls = 0;
}

}  // namespace trainshim::shim
