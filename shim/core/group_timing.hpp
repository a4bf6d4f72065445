#pragma once
// NCCL groups timed as one operation. Inside ncclGroupStart/End NCCL only queues the calls and
// launches them all at the outermost ncclGroupEnd (group.cc ncclGroupEndInternal), so events
// around each call would measure nothing. Instead the first call of each operation of the group
// (a collective number of a communicator, or all point-to-point calls of a communicator) records
// a start event on its stream, and the outermost group end records the end events: every
// operation of the group gets the GPU time of the whole launch.
#include <cstdint>

#include "gpu_timing.hpp"
#include "recorder.hpp"

namespace trainshim::shim {

// A call inside a group on communicator `comm`: adds its operation to the group (taking a start
// event for a new one) and sets the record's flags (InGroup, or why it is not timed).
void group_call(SegmentHeader* header, void* stream, uint64_t comm, EventRecord& call);

// The outermost group ended with `result`; `simulated`: ncclGroupSimulateEnd, nothing launched.
// Hands every operation to the timing thread; when the launch went to NCCL's own thread
// (ncclInProgress) keeps them until NCCL says it is done (launch_checked); when nothing was
// launched gives their events back. Returns the group-end record's flags; `operations` = the
// group's operations.
uint32_t group_finished(Recorder& recorder, int result, bool simulated, uint64_t& operations);

// A call outside a group returned ncclInProgress (a non-blocking communicator: NCCL's thread
// launches it later). Its end event waits for launch_checked.
void launch_pending(Recorder& recorder, uint64_t comm, void* stream, TimingToken token, const EventRecord& call);

// ncclCommGetAsyncError answered `state` for `comm`. Once it is ncclSuccess, NCCL's thread has
// put the launch on the stream and returned: the end events of the communicator's pending
// operations go in now, before whatever the program enqueues next. An error: they stay untimed.
void launch_checked(uint64_t comm, int state);

// A new call on `comm`: launches of it that the program never waited for stay untimed.
void launch_forget(uint64_t comm);

void reset_group_timing_after_fork();

}  // namespace trainshim::shim
