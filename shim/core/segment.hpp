#pragma once
// This process's shared-memory segment: its geometry from the environment, its creation
// (reserved, mapped, locked to show it is live) and its header, published last.
#include <cstdint>
#include <stdexcept>

#include "identity.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::shim {

// Refuses recording for this process; what() is the whole message for the user.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// How many rings of how many records a segment holds.
struct SegmentGeometry {
  uint32_t rings, first_ring_events, ring_events, side_records;
  uint64_t bytes() const { return segment_bytes(rings, first_ring_events, ring_events, side_records); }
};

// /dev/shm's size and what is free of it, in bytes.
struct ShmSpace {
  uint64_t total, free;
};

// The rings are halved below this many records only to refuse.
inline constexpr uint32_t kSmallestRingEvents = 1024;
inline constexpr uint32_t kSmallestSideRecords = 256;

// The most of /dev/shm one process's segment may take: its share of a quarter of /dev/shm among the
// node's `local_ranks` (-1: not known, taken as 1), and never so much that less than half of
// /dev/shm (at most 4 GiB) stays free. That half is the program's own: DataLoader workers pass
// batches through /dev/shm, and NCCL's shared-memory transport lives there; a page it cannot have
// is a SIGBUS at its first write.
uint64_t segment_budget(const ShmSpace& space, int local_ranks);

// `wanted`, its largest part (the first ring, the other rings, the side ring) halved until it fits
// in `budget` bytes; false when even rings of kSmallestRingEvents and a side ring of
// kSmallestSideRecords do not.
bool fit_segment(SegmentGeometry& wanted, uint64_t budget);

// Creates and publishes this process's segment, and holds its liveness lock for the image's life.
// Throws Refused, or another exception, when it cannot: recording is then off.
SegmentHeader* create_segment(const Identity& id);

// In a forked child: the parent's segment stays the parent's, the child holds no lock on it.
void release_segment_in_child();

}  // namespace trainshim::shim
