#pragma once
// The NCCL communicators of this process: their identity across ranks, size, this process's rank
// in them, and the numbers of their operations (the same operation has the same number on every
// rank). Only the public NCCL API is used, never NCCL's structures.
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
// nothing across ranks, and its collectives are reported unmatched. A child whose handle NCCL had
// not yet written when its split returned (non-blocking, NCCL >= 2.23) is registered here, on its
// first use, once NCCL answers for its size and rank.
CommState comm_state(uint64_t handle);

// Every rank splits a communicator in the same order, so (parent, colour, n-th split) names the
// child alike on all of them.
uint64_t split_id(uint64_t parent_handle, int color);
// A shrink: (parent, the excluded ranks in any order, n-th shrink of the parent).
uint64_t shrink_id(uint64_t parent_handle, const int* excluded, int count);

// A child that NCCL will write into `*slot` later (non-blocking split or shrink): `id` is its id.
void child_pending(void* const* slot, uint64_t id);

// The next collective's number on the communicator; every call of one group shares one number.
uint32_t next_sequence(uint64_t handle);
// Point-to-point calls are numbered apart from the collectives: the n-th send to `peer` (or
// receive from it) on the communicator, so that send n of rank a to b meets receive n of b from a.
uint32_t next_p2p_sequence(uint64_t handle, uint32_t peer, bool send);
// A group's point-to-point calls that exchanged with every rank of the communicator are numbered
// as one exchange; every rank of the communicator counts the same exchanges.
uint32_t next_exchange(uint64_t handle);

// NCCL groups of the calling thread. group_ended returns true when the outermost group ended.
void group_started();
bool group_ended();
bool in_group();
// The group end launched nothing (ncclGroupSimulateEnd): the numbers its calls took are given
// back, so that the next real operations get the numbers the other ranks give them.
void forget_group_numbers();

void reset_communicators_after_fork();

}  // namespace trainshim::shim
