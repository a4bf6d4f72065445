#pragma once
// The GPU's own timeline: CUPTI's activity records of kernels, copies and memsets, written into the
// segment as gpuKernel / gpuMemcpy / gpuMemset records on the segment's clock (CUPTI asks trainshim
// for its timestamps). Started with recording, duty-cycled from a thread of the shim's own, and given
// up to any other CUPTI client: one that held CUPTI first (the timeline is then "taken"), or one the
// program starts later (trainshim steps aside: "yielded"). Its state is the segment header's
// gpu_timeline.
#include "recorder.hpp"

namespace trainshim::shim {

// Starts the timeline for the process's new segment, on the thread that created it, before the
// first hooked call goes on: TRAINSHIM_GPU_TIMELINE, TRAINSHIM_CUPTI, TRAINSHIM_GPU_ON_MS and
// TRAINSHIM_GPU_PERIOD_MS say whether and how.
void start_gpu_timeline(Recorder& recorder);

// The program itself calls CUPTI (cuptiSubscribe, cuptiActivityRegisterCallbacks, ...): trainshim,
// if it holds CUPTI, disables its kinds, flushes what CUPTI holds for it and unsubscribes, before
// the program's call is forwarded. A client seen before the timeline starts makes it "taken".
void yield_gpu_timeline();

// In a forked child: CUPTI's state and threads are the parent's, the child's timeline never starts.
void reset_gpu_timeline_after_fork();

}  // namespace trainshim::shim
