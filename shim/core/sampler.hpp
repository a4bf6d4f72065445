#pragma once
// The sampler: a thread of the shim's own, started with recording, that looks at the process at a
// low rate (TRAINSHIM_SAMPLE_HZ, jittered): the state, blocking system call and Python stack of the
// main thread at every tick and of the threads that made recorded CUDA calls in turn, within a CPU
// budget (TRAINSHIM_SAMPLE_BUDGET_US) (Sample records), once a second its threads and child
// processes (ProcessSample), and the setup facts (Facts side records).
//
// It never sends a signal, never ptraces, never takes the GIL and calls nothing of CPython's but
// PyInterpreterState_Main: the other threads' frames are read with reads that fail softly
// (python::capture_thread). It has no native stacks of other threads: their registers cannot be
// had without stopping them.
#include <cstdint>

#include "recorder.hpp"

namespace trainshim::shim {

// Starts the thread for the process's new segment (recording is Ready), or sets the header's
// sampler state to Off (TRAINSHIM_SAMPLE_HZ=0) or Failed. Also reads the environment facts.
void start_sampler(Recorder& recorder);

// A program thread records its first call in this process (Recorder::bind): it is sampled from
// now on, until it exits. Lock-free; no allocation.
void register_sampled_thread(uint32_t tid);

// cudaSetDevice returned successfully on some thread: the device the facts name.
void note_device(int device);

// In the parent, after a fork (pthread_atfork): a census of the children soon after, whatever
// the census period. Lock-free, async-signal-safe.
void note_fork_in_parent();

// In a forked child: no sampler thread runs, no thread is registered; the child's first recorded
// call starts its own.
void reset_sampler_after_fork();

}  // namespace trainshim::shim
