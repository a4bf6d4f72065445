#pragma once
// This process's shared-memory segment: its geometry from the environment, its creation
// (reserved, mapped, locked to show it is live) and its header, published last.
#include <stdexcept>

#include "identity.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::shim {

// Refuses recording for this process; what() is the whole message for the user.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Creates and publishes this process's segment, and holds its liveness lock for the image's life.
// Throws Refused, or another exception, when it cannot: recording is then off.
SegmentHeader* create_segment(const Identity& id);

// In a forked child: the parent's segment stays the parent's, the child holds no lock on it.
void release_segment_in_child();

}  // namespace trainshim::shim
