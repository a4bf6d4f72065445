#pragma once
// The NCCL communicators of this process: their identity across ranks, size, this process's rank
// in them, and the number of the next collective on each (the same collective has the same number
// on every rank). Only the public NCCL API is used, never NCCL's structures.
#include <cstdint>

namespace trainshim::shim {

struct CommState {
  uint64_t id = 0;  // the same on every rank of the communicator
  uint32_t size = 0;
  uint32_t rank = 0;
};

void comm_created(uint64_t handle, const CommState& state);
void comm_destroyed(uint64_t handle);

// A communicator created before recording started gets an id of its own handle: it matches
// nothing across ranks, and its collectives are reported unmatched.
CommState comm_state(uint64_t handle);

// Every rank splits a communicator in the same order, so (parent, colour, n-th split) names the
// child alike on all of them.
uint64_t split_id(uint64_t parent_handle, int color);

// The next collective's number on the communicator; every call of one group shares one number.
uint32_t next_sequence(uint64_t handle);

void group_started();
void group_ended();

void reset_communicators_after_fork();

}  // namespace trainshim::shim
