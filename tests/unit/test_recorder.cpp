// The whole shim -> collector contract in one process, without preloading: the shim's recorder
// starts as on a hooked call (a real segment in /dev/shm), records, and the collector's
// SegmentReader drains exactly what was written. (test_recorder_threads.cpp drives a Recorder on
// heap memory and reads its rings directly.)
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/recorder.hpp"
#include "segment_reader.hpp"
#include "trainshim/names.hpp"

namespace trainshim {
namespace {

// The variables a torchrun rank of a job has, and those that keep the test to itself: no
// collector is started, and the rings are small.
const std::vector<std::pair<const char*, const char*>> kEnvironment = {{"TRAINSHIM_SPAWN_COLLECTOR", "0"},
                                                                       {"TRAINSHIM_RINGS", "2"},
                                                                       {"TRAINSHIM_FIRST_RING_EVENTS", "64"},
                                                                       {"TRAINSHIM_RING_EVENTS", "32"},
                                                                       {"TRAINSHIM_SIDE_RECORDS", "16"},
                                                                       {"RANK", "1"},
                                                                       {"LOCAL_RANK", "1"},
                                                                       {"WORLD_SIZE", "4"}};

class RecorderRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& [name, value] : kEnvironment) setenv(name, value, 1);
    setenv("TRAINSHIM_JOB", job_.c_str(), 1);
  }
  void TearDown() override {
    for (const std::string& name : collector::list_segments(getuid(), job_))
      boost::interprocess::shared_memory_object::remove(name.c_str());
    for (const auto& [name, value] : kEnvironment) unsetenv(name);
    unsetenv("TRAINSHIM_JOB");
  }
  const std::string job_ = "recorder_" + std::to_string(getpid());
};

EventRecord copy(uint64_t begin, uint64_t bytes, Direction direction, HostMemory memory) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
  r.begin_ticks = begin;
  r.end_ticks = begin + 10;
  r.bytes = bytes;
  r.stream = 0x7f00;
  r.direction = static_cast<uint8_t>(direction);
  r.host_memory = static_cast<uint8_t>(memory);
  return r;
}

TEST_F(RecorderRoundTrip, TheCollectorDrainsExactlyTheRecordsTheShimWrote) {
  shim::Recorder* recorder = shim::detail::start_recording();
  ASSERT_NE(recorder, nullptr);
  const std::vector<std::string> segments = collector::list_segments(getuid(), job_);
  ASSERT_EQ(segments, (std::vector<std::string>{segment_name(getuid(), job_, getpid())}));

  const auto main_thread = uint32_t(syscall(SYS_gettid));
  recorder->record(shim::thread_state(),
                   [](EventRecord& r) { r = copy(100, 4096, Direction::HostToDevice, HostMemory::Pageable); });
  recorder->record(shim::thread_state(),
                   [](EventRecord& r) { r = copy(200, 512, Direction::DeviceToHost, HostMemory::Pinned); });
  uint32_t other_thread = 0;
  std::thread([&] {
    other_thread = uint32_t(syscall(SYS_gettid));
    recorder->record(shim::thread_state(), [](EventRecord& r) {
      r = EventRecord{};
      r.api = static_cast<uint16_t>(Api::cudaStreamSynchronize);
      r.begin_ticks = 300;
      r.end_ticks = 400;
      r.stream = 0x7f00;
    });
  }).join();

  collector::SegmentReader reader(segments[0]);
  const SegmentHeader& header = reader.header();
  EXPECT_EQ(header.pid, getpid());
  EXPECT_EQ(header.rank, 1);
  EXPECT_EQ(header.local_rank, 1);
  EXPECT_EQ(header.world_size, 4);
  EXPECT_EQ(std::string(header.job), job_);
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(std::string(header.host), host);
  EXPECT_TRUE(std::string(header.command).starts_with(program_invocation_name)) << header.command;
  EXPECT_EQ(header.ring_count, 2u);
  EXPECT_EQ(header.first_ring_capacity, 64u);
  EXPECT_EQ(header.ring_capacity, 32u);
  EXPECT_EQ(header.side_capacity, 16u);
  EXPECT_TRUE(reader.producer_alive());

  std::vector<EventRecord> drained;
  const collector::DrainCounts counts = reader.drain([&](const EventRecord& r) { drained.push_back(r); }, false);
  EXPECT_EQ(counts.records, 3u);
  EXPECT_EQ(counts.malformed, 0u);
  EXPECT_EQ(counts.unpublished, 0u);
  ASSERT_EQ(drained.size(), 3u);
  // The first thread to record owns the first ring; the other thread shares the last one.
  EXPECT_EQ(drained[0].api, uint16_t(Api::cudaMemcpyAsync));
  EXPECT_EQ(drained[0].tid, main_thread);
  EXPECT_EQ(drained[0].bytes, 4096u);
  EXPECT_EQ(drained[0].direction, uint8_t(Direction::HostToDevice));
  EXPECT_EQ(drained[0].host_memory, uint8_t(HostMemory::Pageable));
  EXPECT_EQ(drained[0].begin_ticks, 100u);
  EXPECT_EQ(drained[0].end_ticks, 110u);
  EXPECT_EQ(drained[0].stream, 0x7f00u);
  EXPECT_EQ(drained[1].api, uint16_t(Api::cudaMemcpyAsync));
  EXPECT_EQ(drained[1].tid, main_thread);
  EXPECT_EQ(drained[1].bytes, 512u);
  EXPECT_EQ(drained[1].direction, uint8_t(Direction::DeviceToHost));
  EXPECT_EQ(drained[1].host_memory, uint8_t(HostMemory::Pinned));
  EXPECT_EQ(drained[2].api, uint16_t(Api::cudaStreamSynchronize));
  EXPECT_EQ(drained[2].tid, other_thread);
  EXPECT_EQ(drained[2].bytes, 0u);
  EXPECT_EQ(drained[2].direction, uint8_t(Direction::None));
  EXPECT_EQ(drained[2].begin_ticks, 300u);

  reader.release();
  EXPECT_EQ(reader.drain([&](const EventRecord& r) { drained.push_back(r); }, false).records, 0u)
      << "nothing is handed out twice";
  EXPECT_EQ(reader.dropped_ring_full(), 0u);
  EXPECT_EQ(reader.dropped_not_ready(), 0u);
}

}  // namespace
}  // namespace trainshim
