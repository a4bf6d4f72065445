#pragma once
// A collective's duration on the GPU: an event recorded on its stream just before it and one just
// after, taken from a small pool; a thread of the shim polls them and writes a CollectiveTiming
// record once both have completed. The calling thread never waits.
#include <cstdint>

#include "recorder.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::shim {

struct TimingToken {
  void* start = nullptr;  // cudaEvent_t; null: this collective is not timed
  void* end = nullptr;
  uint32_t untimed = kUntimedNoEvent;  // why not (CollectiveFlag), 0 when timed
};

// Records the start event, unless the stream is being captured into a graph (or no event is
// free): then the collective is counted as not timed in the segment header.
TimingToken timing_begin(SegmentHeader* header, void* stream);

// Records the end event and hands both to the polling thread with the collective's record.
void timing_end(Recorder& recorder, TimingToken token, void* stream, const EventRecord& collective);

// The collective will not be timed after all (its group launched nothing, or launched on NCCL's
// own thread): the events go back to the pool.
void timing_cancel(TimingToken token);

void reset_timing_after_fork();

}  // namespace trainshim::shim
