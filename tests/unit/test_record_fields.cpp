// The accessors that read an EventRecord's generic fields by what they mean for its class
// (common/trainshim/protocol.hpp).
#include <gtest/gtest.h>

#include "trainshim/protocol.hpp"

namespace trainshim {
namespace {

constexpr EventRecord record_of(Api api, uint64_t object, uint64_t detail) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.object = object;
  r.detail = detail;
  return r;
}

TEST(RecordFields, CommunicatorIdIsTheObjectOfACollectiveAndItsTimingAndTheDetailOfAnInit) {
  EXPECT_EQ(comm_id(record_of(Api::ncclAllReduce, 0x1111, 0x207)), 0x1111u);
  EXPECT_EQ(comm_id(record_of(Api::ncclGpuTiming, 0x2222, 5000)), 0x2222u);
  EXPECT_EQ(comm_id(record_of(Api::ncclCommInitRank, 0xabc0, 0x3333)), 0x3333u);
  // A communicator's end and a copy carry no id: their object is a handle or nothing.
  EXPECT_EQ(comm_id(record_of(Api::ncclCommDestroy, 0xabc0, 0)), 0u);
  EXPECT_EQ(comm_id(record_of(Api::cudaMemcpy, 0x4444, 0x5555)), 0u);
}

TEST(RecordFields, CommunicatorHandleOnlyForItsInitAndEnd) {
  EXPECT_EQ(comm_handle(record_of(Api::ncclCommInitRank, 0xabc0, 0x3333)), 0xabc0u);
  EXPECT_EQ(comm_handle(record_of(Api::ncclCommDestroy, 0xabc0, 0)), 0xabc0u);
  EXPECT_EQ(comm_handle(record_of(Api::ncclAllReduce, 0x1111, 0x207)), 0u);
}

TEST(RecordFields, CollectiveDetailPacksTheReductionAboveTheDataType) {
  // ncclMax (2) over ncclFloat32 (7), as the shim records an all-reduce.
  EXPECT_EQ(collective_detail(2, 7), 0x207u);
  const EventRecord all_reduce = record_of(Api::ncclAllReduce, 1, collective_detail(2, 7));
  EXPECT_EQ(collective_op(all_reduce), 2);
  EXPECT_EQ(collective_data_type(all_reduce), 7);
  // A send has no reduction: its detail is the data type alone.
  const EventRecord send = record_of(Api::ncclSend, 1, collective_detail(0, 9));
  EXPECT_EQ(send.detail, 9u);
  EXPECT_EQ(collective_op(send), 0);
  EXPECT_EQ(collective_data_type(send), 9);
  // The same bits in a timing record are a duration, not an operation.
  EXPECT_EQ(collective_op(record_of(Api::ncclGpuTiming, 1, 0x207)), 0);
}

TEST(RecordFields, GpuTimeOnlyInATimingRecord) {
  EXPECT_EQ(gpu_ns(record_of(Api::ncclGpuTiming, 1, 125'000)), 125'000u);
  EXPECT_EQ(gpu_ns(record_of(Api::ncclAllReduce, 1, 125'000)), 0u);
}

TEST(RecordFields, GroupOperationsOnlyInAGroupEnd) {
  EXPECT_EQ(group_operations(record_of(Api::ncclGroupEnd, 0, 3)), 3u);
  EXPECT_EQ(group_operations(record_of(Api::ncclAllReduce, 1, 3)), 0u);
}

// Every accessor is usable where the record is known at compile time.
static_assert(comm_id(record_of(Api::ncclAllReduce, 7, 0)) == 7);
static_assert(gpu_ns(record_of(Api::ncclGpuTiming, 1, 5)) == 5);

}  // namespace
}  // namespace trainshim
