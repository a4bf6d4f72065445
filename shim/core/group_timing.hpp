#pragma once
// NCCL groups timed as one operation. Inside ncclGroupStart/End NCCL only queues the calls and
// launches them all at the outermost ncclGroupEnd (group.cc ncclGroupEndInternal), so events
// around each call would measure nothing. Instead the first call of each operation of the group
// (a collective number of a communicator, or all point-to-point calls of a communicator) records
// a start event on its stream, and the outermost group end records the end events: every
// operation of the group gets the GPU time of the whole launch.
#include <cstdint>

#include "recorder.hpp"

namespace trainshim::shim {

// A call inside a group: adds its operation to the group (taking a start event for a new one) and
// sets the record's flags (InGroup, or why it is not timed).
void group_call(SegmentHeader* header, void* stream, EventRecord& call);

// The outermost group ended with `result`; `simulated`: ncclGroupSimulateEnd, nothing launched.
// Hands every operation to the timing thread, or, when the launch went to NCCL's own thread
// (ncclInProgress) or did not happen, gives their events back. Returns the group-end record's
// flags; `calls` = the calls made in the group.
uint32_t group_finished(Recorder& recorder, int result, bool simulated, uint64_t& calls);

void reset_group_timing_after_fork();

}  // namespace trainshim::shim
