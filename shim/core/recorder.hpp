#pragma once
// The process's recording state: created on the first hooked call, reset in a forked child.
#include <atomic>
#include <cstdint>

#include "trainshim/protocol.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::shim {

struct ThreadState {
  uint64_t generation;     // the process generation this state was set up in (forks bump it); 0: unbound
  OwnedRingWriter writer;  // the ring this thread owns, if it has one
  uint32_t tid;
  uint32_t ring;   // the shared ring, when it owns none
  uint32_t polls;  // polls made: their stacks are taken for one in kPollStackEvery
  bool busy;       // inside a hook on this thread: nested hooked calls are not recorded
  bool synced;     // a host sync returned on this thread since its last launch: the next launch is recorded
};

inline ThreadState& thread_state() {
  static thread_local ThreadState state __attribute__((tls_model("initial-exec"))){};
  return state;
}

class Recorder;

namespace detail {
enum State : int { Uninitialized, Starting, Ready, Disabled };
extern std::atomic<int> g_state;
extern Recorder* g_recorder;
extern std::atomic<uint64_t> g_generation;  // bumped in a forked child
Recorder* start_recording();
// When (in ticks) a hooked call next makes sure a collector runs; all ones while none is due.
extern std::atomic<uint64_t> g_next_collector_check;
void check_collector(uint64_t now_ticks);
}  // namespace detail

// A collector that was exiting as this process started, or that died, is replaced: a hooked
// call makes sure one holds the job's lock every few seconds. `now` is the call's own clock read.
inline void check_collector_at(uint64_t now) {
  if (now >= detail::g_next_collector_check.load(std::memory_order_relaxed)) [[unlikely]]
    detail::check_collector(now);
}

class Recorder {
 public:
  explicit Recorder(SegmentHeader* header) : header_(header) {}
  SegmentHeader* header() const { return header_; }

  // `fill` writes every field of the record in its ring slot (the slot holds an older record).
  template <class Fill>
  void record(ThreadState& thread, Fill&& fill) {
    if (thread.generation != detail::g_generation.load(std::memory_order_relaxed)) [[unlikely]]
      bind(thread);
    if (thread.writer.control()) [[likely]] {
      Slot* slot = thread.writer.claim();
      if (!slot) return;
      fill(slot->record);
      slot->record.tid = thread.tid;
      thread.writer.publish(slot);
      return;
    }
    record_shared(thread.ring, thread.tid, fill);
  }

  // A record about thread `tid` written by a thread of the shim's own (the sampler): into the
  // shared ring, so that it never takes a ring meant for the program's threads, and without binding
  // the writer, which is not one of the program's CUDA threads.
  template <class Fill>
  void record_about(uint32_t tid, Fill&& fill) {
    record_shared(header_->ring_count - 1, tid, fill);
  }

 private:
  template <class Fill>
  void record_shared(uint32_t ring, uint32_t tid, Fill& fill) {
    uint64_t mark = 0;
    Slot* slot = ring_of(header_, ring).claim(mark);
    if (!slot) return;
    fill(slot->record);
    slot->record.tid = tid;
    RingView::publish(slot, mark);
  }

  // Gives the thread its kernel id and a ring, on its first event in this process: one of its
  // own while one is free (given back when the thread exits), else the last ring, shared. A
  // thread inside a hooked call (not one of the shim's own) is also registered with the sampler.
  void bind(ThreadState& thread);

  SegmentHeader* header_;
};

// The recorder when this process records, else nullptr: before the first hooked call has set it
// up, while another thread sets it up for longer than a thread waits for it (the event is counted
// as lost), or when disabled.
inline Recorder* active_recorder() {
  if (detail::g_state.load(std::memory_order_acquire) == detail::Ready) return detail::g_recorder;
  return detail::start_recording();
}

}  // namespace trainshim::shim
