#pragma once
// The caller's native and Python stacks for the events that need them, each published once as a
// side record and referred to by id afterwards: the steady state of a training loop (the same
// few sites every step) costs a capture, a hash and a table lookup per event.
#include <cstdint>
#include <string_view>

#include "python_stack.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::shim {

struct StackIds {
  uint32_t native = 0;  // 0: none (no frames, or lost: counted in the segment's side ring)
  uint32_t python = 0;  // 0: no Python frames on this thread
};

StackIds capture_stacks(SegmentHeader* header);

// The id of another thread's Python stack (python::capture_thread), published like the caller's,
// in the same id space: a stack seen by a hook and by the sampler is one stack. Its names are read
// softly. Not for hooks: the sampler's thread only.
uint32_t sampled_python_stack(SegmentHeader* header, const python::RawFrame* frames, const python::Capture& captured);

// The String id of `text` (cut to kSideTextBytes), published once, in the id space of the Python
// frames' file and function names; 0 when the side ring is full (asked again next time).
uint32_t string_id(SegmentHeader* header, std::string_view text);

// In a forked child: the ids belong to the parent's segment.
void reset_stacks_after_fork();

}  // namespace trainshim::shim
