#pragma once
// The process's recording state: created on the first hooked call, reset in a forked child.
#include <cstdint>

#include "pinned_ranges.hpp"
#include "trainshim/protocol.hpp"
#include "trainshim/ring.hpp"

namespace trainshim::shim {

struct ThreadState {
  uint64_t generation;  // the process generation this state was set up in (forks bump it)
  uint32_t tid;
  uint32_t ring;
  bool busy;            // inside a hook on this thread: nested hooked calls are not recorded
};

inline ThreadState& thread_state() {
  static thread_local ThreadState state __attribute__((tls_model("initial-exec"))){};
  return state;
}

class Recorder {
 public:
  explicit Recorder(SegmentHeader* header) : header_(header) {}
  SegmentHeader* header() const { return header_; }
  // Binds the calling thread to a ring on its first event.
  void record(EventRecord& record, ThreadState& thread);

 private:
  SegmentHeader* header_;
};

// The recorder when this process records, else nullptr: before the first hooked call has set it
// up, while another thread sets it up (the event is counted as lost), or when disabled.
Recorder* active_recorder();

PinnedRanges& pinned_ranges();

}  // namespace trainshim::shim
