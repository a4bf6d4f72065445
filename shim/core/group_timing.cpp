#include "group_timing.hpp"

#include <bit>

#include "communicators.hpp"
#include "gpu_timing.hpp"

namespace trainshim::shim {

namespace {

constexpr int kNcclInProgress = 7;  // ncclInProgress: a non-blocking group launches on NCCL's thread
constexpr uint32_t kMaxOperations = 64;
// Exchanges are recognised in communicators of up to this many ranks (one bit per rank).
constexpr uint32_t kMaxExchangeRanks = 64;

struct Operation {
  void* stream;
  uint64_t comm;  // ncclComm_t
  TimingToken token;
  EventRecord record;     // its first call's record: what the timing record repeats
  uint64_t participants;  // point-to-point: this rank and every peer of the operation's calls, as bits
};

void add_participants(Operation& o, const EventRecord& call) {
  if (!(call.flags & kPointToPoint) || call.comm_size > kMaxExchangeRanks || call.rank_in_comm >= kMaxExchangeRanks ||
      call.peer >= kMaxExchangeRanks)
    return;
  o.participants |= uint64_t{1} << call.rank_in_comm | uint64_t{1} << call.peer;
}

// torch's all_to_all (all2all_single_equal_split) and a batch_isend_irecv between the two ranks of
// a communicator send to and receive from every rank: every rank waits for the last one to join,
// as in a collective, so the exchange is numbered and matched as one.
void number_exchange(Operation& o) {
  const uint32_t size = o.record.comm_size;
  if (!(o.record.flags & kPointToPoint) || size < 2 || size > kMaxExchangeRanks ||
      std::popcount(o.participants) != int(size))
    return;
  if (const uint32_t number = next_exchange(o.comm)) {
    o.record.flags |= kExchange;
    o.record.sequence = number;
  }
}

struct Group {
  uint32_t count;
  Operation operations[kMaxOperations];
};

Group& group() {
  static thread_local Group state __attribute__((tls_model("initial-exec"))){};
  return state;
}

// Operations launched by NCCL's thread, waiting for ncclCommGetAsyncError to say so. PyTorch
// polls on the thread that made the call, so the list is the thread's.
struct Launches {
  Recorder* recorder;
  uint32_t count;
  Operation operations[kMaxOperations];
};

Launches& launches() {
  static thread_local Launches state __attribute__((tls_model("initial-exec"))){};
  return state;
}

void add_launch(Recorder& recorder, const Operation& o) {
  Launches& l = launches();
  l.recorder = &recorder;
  if (l.count == kMaxOperations) {
    timing_cancel(o.token);
    return;
  }
  l.operations[l.count] = o;
  l.operations[l.count].record.flags |= kGroupInProgress;
  ++l.count;
}

// Ends (timed) or cancels the pending launches of `comm`, keeping the others in order.
void settle(uint64_t comm, bool timed) {
  Launches& l = launches();
  uint32_t kept = 0;
  for (uint32_t i = 0; i < l.count; ++i) {
    Operation& o = l.operations[i];
    if (o.comm != comm) {
      l.operations[kept++] = o;
      continue;
    }
    if (timed && l.recorder) timing_end(*l.recorder, o.token, o.stream, o.record);
    else timing_cancel(o.token);
  }
  l.count = kept;
}

bool same_operation(const Operation& o, void* stream, const EventRecord& call) {
  if (o.stream != stream || o.record.object != call.object) return false;
  const bool p2p = call.flags & kPointToPoint;
  return p2p ? (o.record.flags & kPointToPoint) != 0
             : !(o.record.flags & kPointToPoint) && o.record.sequence == call.sequence;
}

}  // namespace

void group_call(SegmentHeader* header, void* stream, uint64_t comm, EventRecord& call) {
  Group& g = group();
  call.flags |= kInGroup;
  for (uint32_t i = 0; i < g.count; ++i)
    if (same_operation(g.operations[i], stream, call)) {
      call.flags |= g.operations[i].token.untimed;
      add_participants(g.operations[i], call);
      return;
    }
  if (g.count == kMaxOperations) {
    header->untimed_no_event.fetch_add(1, std::memory_order_relaxed);
    call.flags |= kUntimedNoEvent;
    return;
  }
  Operation& o = g.operations[g.count++];
  o.stream = stream;
  o.comm = comm;
  // Nothing of the group is on the stream yet: the start event marks where its launch will begin.
  o.token = timing_begin(header, stream);
  call.flags |= o.token.untimed;
  o.record = call;
  o.participants = 0;
  add_participants(o, call);
}

uint32_t group_finished(Recorder& recorder, int result, bool simulated, uint64_t& operations) {
  Group& g = group();
  operations = g.count;
  uint32_t flags = 0;
  if (simulated) flags = kGroupSimulated;
  else if (result == kNcclInProgress) flags = kGroupInProgress;
  for (uint32_t i = 0; i < g.count; ++i) {
    Operation& o = g.operations[i];
    if ((result == 0 || result == kNcclInProgress) && !simulated) number_exchange(o);
    if (result == 0 && !simulated) timing_end(recorder, o.token, o.stream, o.record);
    else if (result == kNcclInProgress && !simulated) add_launch(recorder, o);
    else timing_cancel(o.token);
  }
  g.count = 0;
  return flags;
}

void launch_pending(Recorder& recorder, uint64_t comm, void* stream, TimingToken token, const EventRecord& call) {
  add_launch(recorder, Operation{stream, comm, token, call, 0});
}

void launch_checked(uint64_t comm, int state) {
  if (state == kNcclInProgress || launches().count == 0) return;
  settle(comm, state == 0);
}

void launch_forget(uint64_t comm) {
  if (launches().count) settle(comm, false);
}

void reset_group_timing_after_fork() {
  group().count = 0;
  launches().count = 0;
}

}  // namespace trainshim::shim
