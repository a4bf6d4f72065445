// The shim-collector contract: header and record validation, and the API table.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>

#include "trainshim/protocol.hpp"

namespace trainshim {
namespace {

constexpr uint32_t kRings = 2;
constexpr uint32_t kFirstCapacity = 64;
constexpr uint32_t kCapacity = 16;
constexpr uint32_t kSide = 4;

// Filled as shim/core/segment.cpp create_segment fills a new segment's header.
std::unique_ptr<SegmentHeader> good_header() {
  auto h = std::make_unique<SegmentHeader>();
  init_segment_header(*h, kRings, kFirstCapacity, kCapacity, kSide,
                      {.pid = 1234,
                       .rank = 0,
                       .local_rank = 0,
                       .world_size = 1,
                       .clock_kind = ClockKind::Tsc,
                       .anchor_monotonic_ns = 1,
                       .anchor_ticks = 2,
                       .anchor_realtime_ns = 3,
                       .host = "node",
                       .job = "job",
                       .command = "python train.py"});
  h->producer_state.store(static_cast<uint32_t>(ProducerState::Live), std::memory_order_release);
  return h;
}

const uint64_t kMapped = segment_bytes(kRings, kFirstCapacity, kCapacity, kSide);

TEST(ValidateHeader, GoodHeaderIsOk) {
  auto h = good_header();
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::Ok);
  // A mapping rounded up to whole pages is larger than the segment: still fine.
  EXPECT_EQ(validate_header(*h, kMapped + 4096), HeaderProblem::Ok);
  h->clock_kind = static_cast<uint32_t>(ClockKind::Monotonic);
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::Ok);
  h->producer_state.store(static_cast<uint32_t>(ProducerState::Exited));
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::Ok);
}

// What the producer writes of a new header, all but its state, which it publishes last.
TEST(InitSegmentHeader, WritesTheLayoutAndTheProducerButPublishesNothing) {
  auto h = std::make_unique<SegmentHeader>();
  init_segment_header(*h, kRings, kFirstCapacity, kCapacity, kSide,
                      {.pid = 77,
                       .rank = 5,
                       .local_rank = 1,
                       .world_size = 8,
                       .clock_kind = ClockKind::Tsc,
                       .anchor_monotonic_ns = 10,
                       .anchor_ticks = 20,
                       .anchor_realtime_ns = 30,
                       .host = "node7",
                       .job = "job7",
                       .command = "python train.py"});
  EXPECT_EQ(h->magic, kSegmentMagic);
  EXPECT_EQ(h->format_version, kFormatVersion);
  EXPECT_EQ(h->segment_bytes, kMapped);
  EXPECT_EQ(h->ring_count, kRings);
  EXPECT_EQ(h->first_ring_capacity, kFirstCapacity);
  EXPECT_EQ(h->ring_capacity, kCapacity);
  EXPECT_EQ(h->side_capacity, kSide);
  EXPECT_EQ(h->pid, 77);
  EXPECT_EQ(h->rank, 5);
  EXPECT_EQ(h->local_rank, 1);
  EXPECT_EQ(h->world_size, 8);
  EXPECT_EQ(h->clock_kind, static_cast<uint32_t>(ClockKind::Tsc));
  EXPECT_EQ(h->anchor_monotonic_ns, 10u);
  EXPECT_EQ(h->anchor_ticks, 20u);
  EXPECT_EQ(h->anchor_realtime_ns, 30u);
  EXPECT_STREQ(h->host, "node7");
  EXPECT_STREQ(h->job, "job7");
  EXPECT_STREQ(h->command, "python train.py");
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::NotPublished);
  h->producer_state.store(static_cast<uint32_t>(ProducerState::Live), std::memory_order_release);
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::Ok);
}

// A command longer than its field is cut to 255 bytes and a NUL; so are host and job names.
TEST(InitSegmentHeader, TextsAreCutToTheirFields) {
  auto h = std::make_unique<SegmentHeader>();
  const std::string command(300, 'c'), host(64, 'h'), job(128, 'j');
  init_segment_header(*h, kRings, kFirstCapacity, kCapacity, kSide, {.host = host, .job = job, .command = command});
  EXPECT_EQ(std::string(h->command), std::string(255, 'c'));
  EXPECT_EQ(std::string(h->host), std::string(63, 'h'));
  EXPECT_EQ(std::string(h->job), std::string(127, 'j'));
}

TEST(ValidateHeader, MappingSmallerThanHeaderIsTooSmall) {
  auto h = good_header();
  EXPECT_EQ(validate_header(*h, sizeof(SegmentHeader) - 1), HeaderProblem::TooSmall);
  EXPECT_EQ(validate_header(*h, 0), HeaderProblem::TooSmall);
}

TEST(ValidateHeader, BadMagic) {
  auto h = good_header();
  h->magic = kSegmentMagic ^ 1;
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadMagic);
  h->magic = 0;
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadMagic);
}

TEST(ValidateHeader, OtherVersion) {
  auto h = good_header();
  h->format_version = kFormatVersion + 1;
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadVersion);
}

TEST(ValidateHeader, InconsistentGeometry) {
  {
    auto h = good_header();
    h->ring_capacity = 12;  // not a power of two
    h->segment_bytes = segment_bytes(kRings, kFirstCapacity, 12, kSide);
    EXPECT_EQ(validate_header(*h, h->segment_bytes), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->ring_capacity = 0;
    h->segment_bytes = segment_bytes(kRings, kFirstCapacity, 0, kSide);
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->ring_count = 0;
    h->segment_bytes = segment_bytes(0, kFirstCapacity, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->segment_bytes += 64;
    EXPECT_EQ(validate_header(*h, kMapped + 64), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    EXPECT_EQ(validate_header(*h, kMapped - 1), HeaderProblem::BadGeometry);  // mapping shorter than the rings
  }
  {
    auto h = good_header();
    h->clock_kind = 0;
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
    h->clock_kind = 3;
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->header_bytes = sizeof(SegmentHeader) + 64;
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->slot_bytes = sizeof(Slot) - 8;
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->ring_count = kMaxRings + 1;
    h->segment_bytes = segment_bytes(kMaxRings + 1, kFirstCapacity, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, h->segment_bytes), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->ring_count = 1;
    h->ring_capacity = kMaxRingCapacity * 2;
    h->segment_bytes = segment_bytes(1, kFirstCapacity, kMaxRingCapacity * 2, kSide);
    EXPECT_EQ(validate_header(*h, h->segment_bytes), HeaderProblem::BadGeometry);
  }
}

// The first ring's capacity is forged as the others' is: each header below is consistent with its
// own segment_bytes and mapping unless said, so that only the capacity can be what refuses it.
TEST(ValidateHeader, ForgedFirstRingCapacityIsRefused) {
  {
    auto h = good_header();
    h->first_ring_capacity = 48;  // not a power of two
    h->segment_bytes = segment_bytes(kRings, 48, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, h->segment_bytes), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->first_ring_capacity = 0;
    h->segment_bytes = segment_bytes(kRings, 0, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, h->segment_bytes), HeaderProblem::BadGeometry);
  }
  {
    auto h = good_header();
    h->first_ring_capacity = kMaxRingCapacity * 2;  // a power of two, too large
    h->segment_bytes = segment_bytes(kRings, kMaxRingCapacity * 2, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, h->segment_bytes), HeaderProblem::BadGeometry);
  }
  {
    // The largest allowed is read.
    auto h = good_header();
    h->first_ring_capacity = kMaxRingCapacity;
    h->segment_bytes = segment_bytes(kRings, kMaxRingCapacity, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, h->segment_bytes), HeaderProblem::Ok);
  }
  {
    // A larger first ring than segment_bytes accounts for, in a mapping large enough for it: the
    // rings after it would lie past the end the header states.
    auto h = good_header();
    h->first_ring_capacity = kFirstCapacity * 2;
    EXPECT_EQ(validate_header(*h, segment_bytes(kRings, kFirstCapacity * 2, kCapacity, kSide)),
              HeaderProblem::BadGeometry);
  }
  {
    // A segment_bytes that counts every ring at the others' capacity.
    auto h = good_header();
    h->segment_bytes = segment_bytes(kRings, kCapacity, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
  }
  {
    // Consistent, but the mapping is shorter than the first ring makes the segment.
    auto h = good_header();
    h->first_ring_capacity = kFirstCapacity * 2;
    h->segment_bytes = segment_bytes(kRings, kFirstCapacity * 2, kCapacity, kSide);
    EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
  }
}

TEST(ValidateHeader, UnpublishedProducerState) {
  auto h = good_header();
  h->producer_state.store(0);
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::NotPublished);
  h->producer_state.store(3);  // no state a producer writes: corrupt, not young
  EXPECT_EQ(validate_header(*h, kMapped), HeaderProblem::BadGeometry);
}

TEST(ValidateHeader, ProblemTexts) {
  EXPECT_EQ(header_problem_text(HeaderProblem::Ok), "ok");
  EXPECT_EQ(header_problem_text(HeaderProblem::BadMagic), "not a trainshim segment (bad magic)");
  EXPECT_EQ(header_problem_text(HeaderProblem::NotPublished), "segment not yet published by its producer");
}

EventRecord good_copy() {
  EventRecord r{};
  r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
  r.begin_ticks = 100;
  r.end_ticks = 250;
  r.bytes = 4096;
  r.direction = static_cast<uint8_t>(Direction::HostToDevice);
  r.host_memory = static_cast<uint8_t>(HostMemory::Pageable);
  return r;
}

EventRecord good_comm_init() {
  EventRecord r{};
  r.api = static_cast<uint16_t>(Api::ncclCommInitRank);
  r.begin_ticks = 10;
  r.end_ticks = 10;
  r.comm_size = 4;
  r.rank_in_comm = 3;
  r.object = 0x5000;  // the communicator's handle
  return r;
}

TEST(ValidateRecord, GoodRecords) {
  EXPECT_TRUE(validate_record(good_copy()));
  EXPECT_TRUE(validate_record(good_comm_init()));
  EventRecord last = good_copy();
  last.api = uint16_t(kApiCount - 1);
  last.direction = kDirectionCount - 1;
  last.host_memory = kHostMemoryCount - 1;
  EXPECT_TRUE(validate_record(last));
}

TEST(ValidateRecord, OutOfRangeEnums) {
  EventRecord r = good_copy();
  r.api = uint16_t(kApiCount);
  EXPECT_FALSE(validate_record(r));
  r.api = 9999;
  EXPECT_FALSE(validate_record(r));
  r = good_copy();
  r.direction = kDirectionCount;
  EXPECT_FALSE(validate_record(r));
  r = good_copy();
  r.host_memory = kHostMemoryCount;
  EXPECT_FALSE(validate_record(r));
}

TEST(ValidateRecord, EndBeforeBegin) {
  EventRecord r = good_copy();
  r.end_ticks = r.begin_ticks - 1;
  EXPECT_FALSE(validate_record(r));
}

TEST(ValidateRecord, CommInitGeometry) {
  EventRecord r = good_comm_init();
  r.comm_size = 0;
  r.rank_in_comm = 0;
  EXPECT_FALSE(validate_record(r));
  r = good_comm_init();
  r.rank_in_comm = r.comm_size;
  EXPECT_FALSE(validate_record(r));
  // A failed ncclCommInitRank carries no communicator: its geometry is not checked.
  r = good_comm_init();
  r.result = 5;
  r.comm_size = 0;
  EXPECT_TRUE(validate_record(r));
  // Neither does a split that left this rank in no child (no handle).
  r = good_comm_init();
  r.api = static_cast<uint16_t>(Api::ncclCommSplit);
  r.object = 0;
  r.comm_size = 0;
  EXPECT_TRUE(validate_record(r));
  // Other classes do not use the fields.
  r = good_copy();
  r.comm_size = 0;
  r.rank_in_comm = 7;
  EXPECT_TRUE(validate_record(r));
}

TEST(ValidateRecord, NonBlockingCommInitGeometry) {
  // ncclInProgress (7) hands out a communicator: its geometry is checked as for success.
  EventRecord r = good_comm_init();
  r.result = 7;
  EXPECT_TRUE(validate_record(r));
  r.rank_in_comm = r.comm_size;
  EXPECT_FALSE(validate_record(r));
}

EventRecord good_all_reduce(Api api = Api::ncclAllReduce) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.object = 0xC0FFEE;
  r.comm_size = 4;
  r.rank_in_comm = 3;
  r.sequence = 1;
  return r;
}

// Review §9: one record's communicator size sizes what the collector keeps of the communicator.
TEST(ValidateRecord, CollectivesNameARankOfABoundedCommunicator) {
  for (Api api : {Api::ncclAllReduce, Api::ncclGpuTiming}) {
    SCOPED_TRACE(std::string(api_info(api).name));
    EXPECT_TRUE(validate_record(good_all_reduce(api)));
    EventRecord r = good_all_reduce(api);
    r.comm_size = 0xFFFFFFFF;
    EXPECT_FALSE(validate_record(r));
    r.comm_size = kMaxCommSize + 1;
    EXPECT_FALSE(validate_record(r));
    r.comm_size = kMaxCommSize;
    r.rank_in_comm = kMaxCommSize - 1;
    EXPECT_TRUE(validate_record(r));
    r = good_all_reduce(api);
    r.rank_in_comm = r.comm_size;
    EXPECT_FALSE(validate_record(r));
    // A communicator the shim could not ask about: size 0, rank 0.
    r.comm_size = 0;
    r.rank_in_comm = 0;
    EXPECT_TRUE(validate_record(r));
    r.rank_in_comm = 1;
    EXPECT_FALSE(validate_record(r));
  }
  EventRecord init = good_comm_init();
  init.comm_size = kMaxCommSize + 1;
  EXPECT_FALSE(validate_record(init));
}

EventRecord good_send() {
  EventRecord r{};
  r.api = static_cast<uint16_t>(Api::ncclSend);
  r.comm_size = 4;
  r.rank_in_comm = 1;
  r.peer = 3;
  r.sequence = 1;
  r.flags = kPointToPoint | kSend | kInGroup;
  return r;
}

TEST(ValidateRecord, CollectiveFlagsAndPeer) {
  EXPECT_TRUE(validate_record(good_send()));
  EventRecord r = good_send();
  r.peer = 4;  // beyond the communicator
  EXPECT_FALSE(validate_record(r));
  r = good_send();
  r.flags = kUntimedCapturing | kUntimedNoEvent | kInGroup;  // a collective: no peer
  EXPECT_FALSE(validate_record(r)) << "a peer without the point-to-point flag";
  r.peer = 0;
  EXPECT_TRUE(validate_record(r));
  r.flags = 1u << 8;  // unknown bit
  EXPECT_FALSE(validate_record(r));
  r = good_copy();
  r.flags = kInGroup;  // a copy carries no flags
  EXPECT_FALSE(validate_record(r));
  r = good_copy();
  r.api = static_cast<uint16_t>(Api::ncclGroupEnd);
  r.flags = kGroupInProgress;
  EXPECT_TRUE(validate_record(r));
}

struct ExpectedApi {
  Api api;
  const char* name;
  ApiClass api_class;
  Library library;
};

TEST(ApiTable, NamesAndClassesMatchTheEnum) {
  const ExpectedApi expected[] = {
      {Api::cudaMemcpy, "cudaMemcpy", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy_ptds, "cudaMemcpy_ptds", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyAsync, "cudaMemcpyAsync", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyAsync_ptsz, "cudaMemcpyAsync_ptsz", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy2D, "cudaMemcpy2D", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy2D_ptds, "cudaMemcpy2D_ptds", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy2DAsync, "cudaMemcpy2DAsync", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy2DAsync_ptsz, "cudaMemcpy2DAsync_ptsz", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyToSymbol, "cudaMemcpyToSymbol", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyToSymbol_ptds, "cudaMemcpyToSymbol_ptds", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyToSymbolAsync, "cudaMemcpyToSymbolAsync", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyToSymbolAsync_ptsz, "cudaMemcpyToSymbolAsync_ptsz", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyFromSymbol, "cudaMemcpyFromSymbol", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyFromSymbol_ptds, "cudaMemcpyFromSymbol_ptds", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyFromSymbolAsync, "cudaMemcpyFromSymbolAsync", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyFromSymbolAsync_ptsz, "cudaMemcpyFromSymbolAsync_ptsz", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy3D, "cudaMemcpy3D", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy3D_ptds, "cudaMemcpy3D_ptds", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy3DAsync, "cudaMemcpy3DAsync", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpy3DAsync_ptsz, "cudaMemcpy3DAsync_ptsz", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyBatchAsync, "cudaMemcpyBatchAsync", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyBatchAsync_ptsz, "cudaMemcpyBatchAsync_ptsz", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyPeer, "cudaMemcpyPeer", ApiClass::Copy, Library::Cudart},
      {Api::cudaMemcpyPeerAsync, "cudaMemcpyPeerAsync", ApiClass::Copy, Library::Cudart},
      {Api::cudaStreamSynchronize, "cudaStreamSynchronize", ApiClass::Sync, Library::Cudart},
      {Api::cudaStreamSynchronize_ptsz, "cudaStreamSynchronize_ptsz", ApiClass::Sync, Library::Cudart},
      {Api::cudaDeviceSynchronize, "cudaDeviceSynchronize", ApiClass::Sync, Library::Cudart},
      {Api::cudaEventSynchronize, "cudaEventSynchronize", ApiClass::Sync, Library::Cudart},
      {Api::cudaSetDevice, "cudaSetDevice", ApiClass::SetDevice, Library::Cudart},
      {Api::cudaFree, "cudaFree", ApiClass::Free, Library::Cudart},
      {Api::cudaStreamQuery, "cudaStreamQuery", ApiClass::Poll, Library::Cudart},
      {Api::cudaStreamQuery_ptsz, "cudaStreamQuery_ptsz", ApiClass::Poll, Library::Cudart},
      {Api::cudaHostAlloc, "cudaHostAlloc", ApiClass::PinnedAlloc, Library::Cudart},
      {Api::cudaMallocHost, "cudaMallocHost", ApiClass::PinnedAlloc, Library::Cudart},
      {Api::cudaHostRegister, "cudaHostRegister", ApiClass::PinnedRegister, Library::Cudart},
      {Api::cudaFreeHost, "cudaFreeHost", ApiClass::PinnedFree, Library::Cudart},
      {Api::cudaHostUnregister, "cudaHostUnregister", ApiClass::PinnedFree, Library::Cudart},
      {Api::cudaLaunchKernel, "cudaLaunchKernel", ApiClass::Launch, Library::Cudart},
      {Api::cudaLaunchKernel_ptsz, "cudaLaunchKernel_ptsz", ApiClass::Launch, Library::Cudart},
      {Api::__cudaLaunchKernel, "__cudaLaunchKernel", ApiClass::Launch, Library::Cudart},
      {Api::__cudaLaunchKernel_ptsz, "__cudaLaunchKernel_ptsz", ApiClass::Launch, Library::Cudart},
      {Api::cudaLaunchKernelExC, "cudaLaunchKernelExC", ApiClass::Launch, Library::Cudart},
      {Api::cudaLaunchKernelExC_ptsz, "cudaLaunchKernelExC_ptsz", ApiClass::Launch, Library::Cudart},
      {Api::cudaLaunchCooperativeKernel, "cudaLaunchCooperativeKernel", ApiClass::Launch, Library::Cudart},
      {Api::cudaLaunchCooperativeKernel_ptsz, "cudaLaunchCooperativeKernel_ptsz", ApiClass::Launch, Library::Cudart},
      {Api::cudaGraphLaunch, "cudaGraphLaunch", ApiClass::Launch, Library::Cudart},
      {Api::cudaGraphLaunch_ptsz, "cudaGraphLaunch_ptsz", ApiClass::Launch, Library::Cudart},
      {Api::cudaStreamBeginCapture, "cudaStreamBeginCapture", ApiClass::Capture, Library::Cudart},
      {Api::cudaStreamBeginCapture_ptsz, "cudaStreamBeginCapture_ptsz", ApiClass::Capture, Library::Cudart},
      {Api::cudaStreamEndCapture, "cudaStreamEndCapture", ApiClass::Capture, Library::Cudart},
      {Api::cudaStreamEndCapture_ptsz, "cudaStreamEndCapture_ptsz", ApiClass::Capture, Library::Cudart},
      {Api::cudaGraphInstantiateWithFlags, "cudaGraphInstantiateWithFlags", ApiClass::Capture, Library::Cudart},
      {Api::ncclAllReduce, "ncclAllReduce", ApiClass::Collective, Library::Nccl},
      {Api::ncclReduceScatter, "ncclReduceScatter", ApiClass::Collective, Library::Nccl},
      {Api::ncclAllGather, "ncclAllGather", ApiClass::Collective, Library::Nccl},
      {Api::ncclBroadcast, "ncclBroadcast", ApiClass::Collective, Library::Nccl},
      {Api::ncclBcast, "ncclBcast", ApiClass::Collective, Library::Nccl},
      {Api::ncclReduce, "ncclReduce", ApiClass::Collective, Library::Nccl},
      {Api::ncclAlltoAll, "ncclAlltoAll", ApiClass::Collective, Library::Nccl},
      {Api::ncclGather, "ncclGather", ApiClass::Collective, Library::Nccl},
      {Api::ncclScatter, "ncclScatter", ApiClass::Collective, Library::Nccl},
      {Api::ncclSend, "ncclSend", ApiClass::Collective, Library::Nccl},
      {Api::ncclRecv, "ncclRecv", ApiClass::Collective, Library::Nccl},
      {Api::ncclGroupStart, "ncclGroupStart", ApiClass::GroupStart, Library::Nccl},
      {Api::ncclGroupEnd, "ncclGroupEnd", ApiClass::GroupEnd, Library::Nccl},
      {Api::ncclGroupSimulateEnd, "ncclGroupSimulateEnd", ApiClass::GroupEnd, Library::Nccl},
      {Api::ncclCommInitRank, "ncclCommInitRank", ApiClass::CommInit, Library::Nccl},
      {Api::ncclCommInitRankConfig, "ncclCommInitRankConfig", ApiClass::CommInit, Library::Nccl},
      {Api::ncclCommInitRankScalable, "ncclCommInitRankScalable", ApiClass::CommInit, Library::Nccl},
      {Api::ncclCommInitAll, "ncclCommInitAll", ApiClass::CommInit, Library::Nccl},
      {Api::ncclCommSplit, "ncclCommSplit", ApiClass::CommInit, Library::Nccl},
      {Api::ncclCommShrink, "ncclCommShrink", ApiClass::CommInit, Library::Nccl},
      {Api::ncclCommGetAsyncError, "ncclCommGetAsyncError", ApiClass::CommQuery, Library::Nccl},
      {Api::ncclCommDestroy, "ncclCommDestroy", ApiClass::CommEnd, Library::Nccl},
      {Api::ncclCommAbort, "ncclCommAbort", ApiClass::CommEnd, Library::Nccl},
      {Api::cuMemcpyHtoD_v2, "cuMemcpyHtoD_v2", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyHtoD_v2_ptds, "cuMemcpyHtoD_v2_ptds", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyDtoH_v2_ptds, "cuMemcpyDtoH_v2_ptds", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyDtoD_v2, "cuMemcpyDtoD_v2", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyDtoD_v2_ptds, "cuMemcpyDtoD_v2_ptds", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyHtoDAsync_v2_ptsz, "cuMemcpyHtoDAsync_v2_ptsz", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyDtoHAsync_v2, "cuMemcpyDtoHAsync_v2", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyDtoHAsync_v2_ptsz, "cuMemcpyDtoHAsync_v2_ptsz", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpy, "cuMemcpy", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpy_ptds, "cuMemcpy_ptds", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyAsync, "cuMemcpyAsync", ApiClass::Copy, Library::Driver},
      {Api::cuMemcpyAsync_ptsz, "cuMemcpyAsync_ptsz", ApiClass::Copy, Library::Driver},
      {Api::cuStreamSynchronize, "cuStreamSynchronize", ApiClass::Sync, Library::Driver},
      {Api::cuStreamSynchronize_ptsz, "cuStreamSynchronize_ptsz", ApiClass::Sync, Library::Driver},
      {Api::cuCtxSynchronize, "cuCtxSynchronize", ApiClass::Sync, Library::Driver},
      {Api::cuCtxSynchronize_v2, "cuCtxSynchronize_v2", ApiClass::Sync, Library::Driver},
      {Api::cuEventSynchronize, "cuEventSynchronize", ApiClass::Sync, Library::Driver},
      {Api::cuMemFree_v2, "cuMemFree_v2", ApiClass::Free, Library::Driver},
      {Api::cuStreamQuery, "cuStreamQuery", ApiClass::Poll, Library::Driver},
      {Api::cuStreamQuery_ptsz, "cuStreamQuery_ptsz", ApiClass::Poll, Library::Driver},
      {Api::cuMemAllocHost_v2, "cuMemAllocHost_v2", ApiClass::PinnedAlloc, Library::Driver},
      {Api::cuMemHostAlloc, "cuMemHostAlloc", ApiClass::PinnedAlloc, Library::Driver},
      {Api::cuMemHostRegister_v2, "cuMemHostRegister_v2", ApiClass::PinnedRegister, Library::Driver},
      {Api::cuMemFreeHost, "cuMemFreeHost", ApiClass::PinnedFree, Library::Driver},
      {Api::cuMemHostUnregister, "cuMemHostUnregister", ApiClass::PinnedFree, Library::Driver},
      {Api::ncclGpuTiming, "ncclGpuTiming", ApiClass::CollectiveTiming, Library::Nccl},
      {Api::gpuKernel, "gpuKernel", ApiClass::GpuKernel, Library::Nccl},
      {Api::gpuMemcpy, "gpuMemcpy", ApiClass::GpuCopy, Library::Nccl},
      {Api::gpuMemset, "gpuMemset", ApiClass::GpuSet, Library::Nccl},
      {Api::threadSample, "threadSample", ApiClass::Sample, Library::Nccl},
      {Api::processSample, "processSample", ApiClass::ProcessSample, Library::Nccl},
      {Api::gpuTimelineOn, "gpuTimelineOn", ApiClass::GpuWindow, Library::Nccl},
      {Api::gpuTimelineOff, "gpuTimelineOff", ApiClass::GpuWindow, Library::Nccl},
  };
  ASSERT_EQ(kApiCount, std::size(expected));
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    const ExpectedApi& e = expected[i];
    SCOPED_TRACE(e.name);
    EXPECT_EQ(static_cast<std::size_t>(e.api), i);
    EXPECT_EQ(api_info(e.api).name, e.name);
    EXPECT_EQ(api_info(e.api).api_class, e.api_class);
    EXPECT_EQ(api_info(e.api).library, e.library);
  }
}

TEST(ApiTable, ClassAndEnumNames) {
  EXPECT_EQ(api_class_name(ApiClass::Copy), "copy");
  EXPECT_EQ(api_class_name(ApiClass::Collective), "collective");
  EXPECT_EQ(api_class_name(ApiClass::PinnedRegister), "pinned_register");
  EXPECT_EQ(direction_name(Direction::HostToDevice), "h2d");
  EXPECT_EQ(direction_name(Direction::Peer), "peer");
  EXPECT_EQ(direction_name(Direction(6)), "invalid");
  EXPECT_EQ(host_memory_name(HostMemory::Pageable), "pageable");
  EXPECT_EQ(host_memory_name(HostMemory(4)), "invalid");
}

TEST(Layout, SegmentSizes) {
  EXPECT_EQ(ring_bytes(16), 192u + 16u * 96u);
  EXPECT_EQ(segment_bytes(2, 16, 16, kSide), sizeof(SegmentHeader) + 2u * (192u + 16u * 96u) + 192u + kSide * 1032u);
  EXPECT_EQ(segment_bytes(3, 64, 16, kSide),
            sizeof(SegmentHeader) + (192u + 64u * 96u) + 2u * (192u + 16u * 96u) + 192u + kSide * 1032u);
  // The shim's default: 8 rings, the first of 131,072 records, the others of 16,384, 2,048 side records.
  EXPECT_EQ(sizeof(SegmentHeader), 640u);
  EXPECT_EQ(segment_bytes(8, 131072, 16384, 2048), 25'708'864u);
  EXPECT_EQ(sizeof(SideSlot), 1032u);
  EXPECT_EQ(sizeof(SegmentHeader) % 64, 0u);
}

}  // namespace
}  // namespace trainshim
