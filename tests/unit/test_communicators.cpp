// The shim's communicator table (shim/core/communicators.*): the numbers that let the same
// collective be matched across ranks, and the ids of split communicators.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "core/communicators.hpp"

namespace trainshim::shim {
namespace {

// Live communicators the table holds (kCapacity in communicators.cpp).
constexpr uint64_t kTableEntries = 512;

constexpr uint64_t kWorld = 0x1000, kOther = 0x2000;  // handles, as NCCL's ncclComm_t pointers
constexpr uint64_t kWorldId = 0xA11, kOtherId = 0xB22;

class Communicators : public ::testing::Test {
 protected:
  // The table and the thread's groups start empty, as in a forked child.
  void SetUp() override { reset_communicators_after_fork(); }
  void TearDown() override { reset_communicators_after_fork(); }
};

TEST_F(Communicators, EachCommunicatorNumbersItsOwnCollectivesFromOne) {
  comm_created(kWorld, {kWorldId, 4, 1});
  comm_created(kOther, {kOtherId, 2, 0});
  EXPECT_EQ(next_sequence(kWorld), 1u);
  EXPECT_EQ(next_sequence(kWorld), 2u);
  EXPECT_EQ(next_sequence(kOther), 1u);
  EXPECT_EQ(next_sequence(kWorld), 3u);
  const CommState world = comm_state(kWorld);
  EXPECT_EQ(world.id, kWorldId);
  EXPECT_EQ(world.size, 4u);
  EXPECT_EQ(world.rank, 1u);
}

// NCCL reuses a destroyed communicator's memory: a new communicator at that handle starts again.
TEST_F(Communicators, ADestroyedHandleNumbersNothingUntilACommunicatorIsCreatedThere) {
  comm_created(kWorld, {kWorldId, 4, 1});
  EXPECT_EQ(next_sequence(kWorld), 1u);
  comm_destroyed(kWorld);
  EXPECT_EQ(next_sequence(kWorld), 0u);
  EXPECT_EQ(comm_state(kWorld).size, 0u);
  comm_created(kWorld, {kOtherId, 2, 0});
  EXPECT_EQ(next_sequence(kWorld), 1u);
  EXPECT_EQ(comm_state(kWorld).id, kOtherId);
}

// A communicator created before recording started: its own id (derived from its handle, equal to
// no registered id), size 0, and no numbers; its collectives are reported unmatched.
TEST_F(Communicators, AnUnknownHandleGetsALocalIdAndNoNumbers) {
  const CommState unknown = comm_state(kOther);
  EXPECT_EQ(unknown.size, 0u);
  EXPECT_EQ(unknown.rank, 0u);
  EXPECT_NE(unknown.id, 0u);
  EXPECT_NE(unknown.id, kOther);
  EXPECT_EQ(comm_state(kOther).id, unknown.id) << "the same handle, the same id";
  EXPECT_NE(comm_state(kOther + 8).id, unknown.id);
  EXPECT_EQ(next_sequence(kOther), 0u);
  EXPECT_EQ(next_sequence(0), 0u);
}

// Every call of one group (nested groups included) shares the group's number on a communicator;
// the next group, or a call outside any group, takes the next number.
TEST_F(Communicators, AGroupTakesOneNumberPerCommunicator) {
  comm_created(kWorld, {kWorldId, 4, 1});
  comm_created(kOther, {kOtherId, 2, 0});
  EXPECT_EQ(next_sequence(kWorld), 1u);
  EXPECT_FALSE(in_group());
  group_started();
  EXPECT_TRUE(in_group());
  EXPECT_EQ(next_sequence(kWorld), 2u);
  EXPECT_EQ(next_sequence(kWorld), 2u);
  EXPECT_EQ(next_sequence(kOther), 1u);
  group_started();  // nested: still the outer group
  EXPECT_EQ(next_sequence(kWorld), 2u);
  EXPECT_FALSE(group_ended()) << "only the outermost end ends the group";
  EXPECT_TRUE(in_group());
  EXPECT_EQ(next_sequence(kOther), 1u);
  EXPECT_TRUE(group_ended());
  EXPECT_FALSE(in_group());
  EXPECT_EQ(next_sequence(kWorld), 3u);
  group_started();
  EXPECT_EQ(next_sequence(kWorld), 4u);
  EXPECT_EQ(next_sequence(kWorld), 4u);
  EXPECT_TRUE(group_ended());
  EXPECT_EQ(next_sequence(kOther), 2u);
}

TEST_F(Communicators, AGroupEndWithoutAStartEndsNothing) {
  comm_created(kWorld, {kWorldId, 4, 1});
  EXPECT_FALSE(group_ended());
  EXPECT_FALSE(in_group());
  EXPECT_EQ(next_sequence(kWorld), 1u);
  EXPECT_EQ(next_sequence(kWorld), 2u);
}

// ncclGroupSimulateEnd launches nothing: the numbers its group took are given back, so that the
// next real collectives get the numbers the other ranks give them.
TEST_F(Communicators, ASimulatedGroupGivesItsNumbersBack) {
  comm_created(kWorld, {kWorldId, 4, 1});
  comm_created(kOther, {kOtherId, 2, 0});
  EXPECT_EQ(next_sequence(kWorld), 1u);
  group_started();
  EXPECT_EQ(next_sequence(kWorld), 2u);
  EXPECT_EQ(next_sequence(kOther), 1u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 3, true), 1u);
  EXPECT_TRUE(group_ended());
  forget_group_numbers();
  EXPECT_EQ(next_sequence(kWorld), 2u);
  EXPECT_EQ(next_sequence(kOther), 1u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 3, true), 1u);
}

// Sends to a peer and receives from it are numbered apart, per peer, and apart from collectives.
TEST_F(Communicators, PointToPointCallsAreNumberedPerPeerAndDirection) {
  comm_created(kWorld, {0xC33, 4, 0});
  EXPECT_EQ(next_p2p_sequence(kWorld, 1, true), 1u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 1, true), 2u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 1, false), 1u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 2, true), 1u);
  EXPECT_EQ(next_sequence(kWorld), 1u);
  EXPECT_EQ(next_p2p_sequence(kOther, 1, true), 0u) << "an unknown communicator numbers nothing";
}

// A forked child has no communicator: one it creates with the id of its parent's numbers its
// sends and receives from one again.
TEST_F(Communicators, AForkedChildNumbersPointToPointCallsFromOne) {
  comm_created(kWorld, {kWorldId, 4, 0});
  EXPECT_EQ(next_p2p_sequence(kWorld, 1, true), 1u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 1, true), 2u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 2, false), 1u);
  reset_communicators_after_fork();
  comm_created(kWorld, {kWorldId, 4, 0});
  EXPECT_EQ(next_p2p_sequence(kWorld, 1, true), 1u);
  EXPECT_EQ(next_p2p_sequence(kWorld, 2, false), 1u);
}

// Two ranks hold the same parent at different addresses; each splits it twice, in the same order.
// The n-th split with a colour gets the same id on both, whatever the handles.
TEST_F(Communicators, SplitsInTheSameOrderGetTheSameIdsOnEveryRank) {
  comm_created(kWorld, {kWorldId, 4, 0});
  const uint64_t first = split_id(kWorld, 0), second = split_id(kWorld, 1), third = split_id(kWorld, 0);
  EXPECT_EQ(std::set<uint64_t>({first, second, third, kWorldId}).size(), 4u)
      << "each split of one parent, also a second one with the same colour, is a communicator of its own";

  reset_communicators_after_fork();  // now the other rank, whose handle of the parent differs
  comm_created(kOther, {kWorldId, 4, 3});
  EXPECT_EQ(split_id(kOther, 0), first);
  EXPECT_EQ(split_id(kOther, 1), second);
  EXPECT_EQ(split_id(kOther, 0), third);
}

// The id names (parent, colour, n-th split): a rank that splits in another order gets other ids.
TEST_F(Communicators, SplitsInAnotherOrderGetOtherIds) {
  comm_created(kWorld, {kWorldId, 4, 0});
  const uint64_t colour_0 = split_id(kWorld, 0), colour_1 = split_id(kWorld, 1);
  reset_communicators_after_fork();
  comm_created(kWorld, {kWorldId, 4, 1});
  EXPECT_NE(split_id(kWorld, 1), colour_1);
  EXPECT_NE(split_id(kWorld, 0), colour_0);
}

// A parent of another id gives other children; a child registered under its split id counts its
// own splits from the first.
TEST_F(Communicators, SplitIdsDependOnTheParentsId) {
  comm_created(kWorld, {kWorldId, 4, 0});
  comm_created(kOther, {kOtherId, 4, 0});
  const uint64_t child_id = split_id(kWorld, 0);
  EXPECT_NE(split_id(kOther, 0), child_id);
  constexpr uint64_t kChild = 0x3000;
  comm_created(kChild, {child_id, 2, 0});
  const uint64_t grandchild = split_id(kChild, 0);
  EXPECT_NE(grandchild, child_id);
  reset_communicators_after_fork();
  comm_created(kChild, {child_id, 2, 1});
  EXPECT_EQ(split_id(kChild, 0), grandchild);
}

// The excluded ranks may be listed in any order: NCCL sorts them itself.
TEST_F(Communicators, ShrinkIdsIgnoreTheOrderOfTheExcludedRanks) {
  comm_created(kWorld, {kWorldId, 4, 0});
  const int excluded[] = {3, 1};
  const uint64_t shrunk = shrink_id(kWorld, excluded, 2);
  reset_communicators_after_fork();
  comm_created(kWorld, {kWorldId, 4, 2});
  const int sorted[] = {1, 3};
  EXPECT_EQ(shrink_id(kWorld, sorted, 2), shrunk);
  reset_communicators_after_fork();
  comm_created(kWorld, {kWorldId, 4, 0});
  const int other[] = {1, 2};
  EXPECT_NE(shrink_id(kWorld, other, 2), shrunk) << "other ranks excluded: another communicator";
}

// The table holds 512 live communicators; one more is not registered (its collectives carry no
// number and no size, as an unknown one's) until one of the others is destroyed.
TEST_F(Communicators, BeyondAFullTableACommunicatorIsUnknownUntilAnEntryIsFree) {
  for (uint64_t i = 0; i < kTableEntries; ++i) comm_created(kWorld + i * 8, {kWorldId + i, 8, 1});
  for (uint64_t i = 0; i < kTableEntries; ++i) {
    ASSERT_EQ(next_sequence(kWorld + i * 8), 1u) << "communicator " << i;
    ASSERT_EQ(comm_state(kWorld + i * 8).id, kWorldId + i);
  }
  const uint64_t beyond = kWorld + kTableEntries * 8;
  comm_created(beyond, {kOtherId, 8, 1});
  EXPECT_EQ(next_sequence(beyond), 0u);
  EXPECT_EQ(comm_state(beyond).size, 0u);
  EXPECT_NE(comm_state(beyond).id, kOtherId);

  comm_destroyed(kWorld + 5 * 8);
  comm_created(beyond, {kOtherId, 8, 1});
  EXPECT_EQ(next_sequence(beyond), 1u);
  EXPECT_EQ(comm_state(beyond).id, kOtherId);
  EXPECT_EQ(next_sequence(kWorld), 2u) << "the others keep their numbers";
}

}  // namespace
}  // namespace trainshim::shim
