// The shim inside the job's own process: whatever /dev/shm, the environment or the program's own
// loading does, the job runs as it would without trainshim.
#include <fcntl.h>
#include <fmt/format.h>
#include <glob.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "harness.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::test {
namespace {

// Standard error too: the shim's messages go there. `command` is one simple command.
Outcome run_with_messages(const std::string& command) { return run("2>&1 " + command); }

int occurrences(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// The paths of the job's segments left in /dev/shm.
std::vector<std::string> segments_of(const std::string& job) {
  glob_t found{};
  std::vector<std::string> paths;
  if (glob(("/dev/shm/trainshim-" + std::to_string(getuid()) + "-" + job + "-*").c_str(), 0, nullptr, &found) == 0)
    paths.assign(found.gl_pathv, found.gl_pathv + found.gl_pathc);
  globfree(&found);
  return paths;
}

// Reads the header of the job's one segment left in /dev/shm (nothing drained it), and removes it.
bool take_only_segment(const std::string& job, SegmentHeader& header) {
  const auto segments = segments_of(job);
  if (segments.size() != 1) return false;
  const int fd = open(segments[0].c_str(), O_RDONLY);
  const bool read_whole = fd >= 0 && read(fd, &header, sizeof header) == ssize_t(sizeof header);
  if (fd >= 0) close(fd);
  unlink(segments[0].c_str());
  return read_whole;
}

// A private mount namespace with a 1 MiB tmpfs on /dev/shm: a full /dev/shm, for real.
std::string with_tiny_dev_shm(const std::string& command) {
  return "unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm && " + command + "'";
}

TEST(HostProcess, FullDevShmTurnsRecordingOffAndTheJobRunsUnchanged) {
  // The namespace itself works here (tests run as root): otherwise this test proves nothing.
  const auto probe = run(with_tiny_dev_shm("df -k --output=size /dev/shm | tail -1 | tr -d \" \""));
  ASSERT_EQ(probe.exit_code, 0) << probe.out;
  ASSERT_EQ(probe.out, "1024\n");

  // 20,000 copies and syncs fill a ring: more pages than 1 MiB holds, each taken at its first write.
  Scratch s;
  const auto result = run_with_messages(with_tiny_dev_shm("TRAINSHIM_SPAWN_COLLECTOR=0 " + preload_env(s.job) + " " +
                                                          program("host_copies_prog") +
                                                          " 20000 1; echo rc=$?; ls -A /dev/shm | wc -l"));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(occurrences(result.out, "trainshim: /dev/shm is too small (1.0 MiB, 1.0 MiB free) for a segment that "
                                    "leaves the job's own shared memory its room (half of /dev/shm, up to 4 GiB): "
                                    "recording is off, the job runs unchanged; enlarge /dev/shm (docker --shm-size)\n"),
            1)
      << result.out;
  EXPECT_EQ(occurrences(result.out, "trainshim:"), 1) << result.out;
  // Every call made, the job's exit status its own, and no segment left behind.
  EXPECT_NE(result.out.find("done 1 x 20000\nrc=0\n0\n"), std::string::npos) << result.out;
}

// A /dev/shm of `mib` MiB in a namespace of its own.
std::string with_dev_shm_of(int mib, const std::string& command) {
  return "unshare -m sh -c 'mount -t tmpfs -o size=" + std::to_string(mib) + "m tmpfs /dev/shm && " + command + "'";
}

// `ranks` ranks (simrun) each sharing a `batch_mib` MiB batch in a /dev/shm of `shm_mib` MiB, with
// no collector; the output ends with "rc=<status>" and the size of each segment left.
Outcome ranks_sharing_batches(const Scratch& s, int shm_mib, int ranks, int batch_mib) {
  return run_with_messages(with_dev_shm_of(
      shm_mib, "TRAINSHIM_SPAWN_COLLECTOR=0 " + preload_env(s.job) + " " + Paths::source + "/scripts/simrun -n " +
                   std::to_string(ranks) + " -- " + program("host_resources_prog") + " shm " +
                   std::to_string(batch_mib) + "; echo rc=$?; stat -c %s /dev/shm/trainshim-*"));
}

// How the shim prints a segment's size.
std::string mib_text(uint64_t bytes) { return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20)); }

// The room the program needs for its own shared memory (DataLoader batches) is left to it: the
// segment shrinks to a quarter of /dev/shm, shared by the node's ranks (review round 2, §2: a
// 30 MiB batch in a 48 MiB /dev/shm died of SIGBUS, and two ranks' 10 MiB in Docker's 64 MiB).
TEST(HostProcess, ASmallDevShmKeepsRoomForTheJobsOwnSharedMemory) {
  Scratch s;
  const auto alone = run_with_messages(with_dev_shm_of(48, "TRAINSHIM_SPAWN_COLLECTOR=0 " + preload_env(s.job) + " " +
                                                               program("host_resources_prog") +
                                                               " shm 30; echo rc=$?; stat -c %s /dev/shm/trainshim-*"));
  ASSERT_EQ(alone.exit_code, 0) << alone.out;
  // A quarter of 48 MiB: the first ring halved twice, the others once (tests/unit/test_segment_fit.cpp).
  const uint64_t fitted = segment_bytes(8, 32768, 8192, 2048);
  EXPECT_EQ(alone.out, "trainshim: /dev/shm is small (48.0 MiB, 48.0 MiB free): this process records into " +
                           mib_text(fitted) +
                           " instead of 24.5 MiB, so that the job's own shared memory keeps its room; records "
                           "that do not fit are dropped and counted; enlarge /dev/shm (docker --shm-size) to record "
                           "in full\nshared 30 MiB\nrc=0\n" +
                           std::to_string(fitted) + "\n");

  // Docker's default 64 MiB, two ranks (LOCAL_WORLD_SIZE=2): 8 MiB each, and both batches fit.
  const auto ranks = ranks_sharing_batches(s, 64, 2, 10);
  ASSERT_EQ(ranks.exit_code, 0) << ranks.out;
  EXPECT_EQ(occurrences(ranks.out, "shared 10 MiB\n"), 2) << ranks.out;
  EXPECT_EQ(occurrences(ranks.out, "rc=0\n"), 1) << ranks.out;
  const uint64_t each = segment_bytes(8, 32768, 4096, 2048);
  EXPECT_EQ(occurrences(ranks.out, "this process records into " + mib_text(each) + " instead of 24.5 MiB"), 2)
      << ranks.out;
  EXPECT_EQ(occurrences(ranks.out, "\n" + std::to_string(each) + "\n"), 2) << ranks.out;

  // 8 ranks in 64 MiB, each sharing 4 MiB of its own: every rank runs to its end, and each records
  // into at most 2 MiB (the rings of tests/unit/test_segment_fit.cpp) or says why it does not.
  const auto eight = ranks_sharing_batches(s, 64, 8, 4);
  ASSERT_EQ(eight.exit_code, 0) << eight.out;
  EXPECT_EQ(occurrences(eight.out, "shared 4 MiB\n"), 8) << eight.out;
  EXPECT_EQ(occurrences(eight.out, "rc=0\n"), 1) << eight.out;
  const uint64_t eighth = segment_bytes(8, 8192, 1024, 512);
  const int recording =
      occurrences(eight.out, "this process records into " + mib_text(eighth) + " instead of 24.5 MiB");
  EXPECT_EQ(recording + occurrences(eight.out, "recording is off, the job runs unchanged"), 8) << eight.out;
  EXPECT_GE(recording, 4) << eight.out;
  EXPECT_EQ(occurrences(eight.out, "\n" + std::to_string(eighth) + "\n"), recording) << eight.out;
}

// The files the program could open, THREADS threads having made a CUDA call, under RLIMIT_NOFILE
// `limit`; `shim`: "" (no shim), "on", or "off" (the sampler off).
int files_opened(const Scratch& s, int threads, int limit, const std::string& shim) {
  const std::string env = shim.empty() ? ""
                                       : "TRAINSHIM_SPAWN_COLLECTOR=0 " +
                                             std::string(shim == "off" ? "TRAINSHIM_SAMPLE_HZ=0 " : "") +
                                             preload_env(s.job) + " ";
  const auto result =
      run(env + program("host_resources_prog") + " files " + std::to_string(threads) + " " + std::to_string(limit));
  for (const std::string& segment : segments_of(s.job)) unlink(segment.c_str());
  int opened = -1;
  return result.exit_code == 0 && std::sscanf(result.out.c_str(), "opened %d", &opened) == 1 ? opened : -1;
}

// The sampler holds the main thread's stat file between ticks, the other files only while it reads
// a thread, and lets go of the one it holds once refused a descriptor: the program can open as many files as
// without it (review round 2, §3: with 63 sampled threads under a limit of 256 the program could
// open 56 files instead of 251).
TEST(HostProcess, SampledThreadsHoldNoDescriptorTheProgramNeeds) {
  Scratch s;
  const int unsampled = files_opened(s, 16, 256, "off");
  ASSERT_GT(unsampled, 200);
  EXPECT_GE(files_opened(s, 16, 256, ""), unsampled);
  for (const int threads : {1, 16, 63}) EXPECT_EQ(files_opened(s, threads, 256, "on"), unsampled) << threads;
  const int unsampled_1024 = files_opened(s, 16, 1024, "off");
  EXPECT_EQ(files_opened(s, 16, 1024, "on"), unsampled_1024);
}

// However many threads it samples, the sampler has at most 3 descriptors open at once (the main
// thread's stat and syscall files, and another thread's stat or syscall file while it reads it; a C
// program has no memory file open): seen at a thousand ticks a second, every thread read at each.
TEST(HostProcess, TheSamplerHoldsAFewDescriptorsWhateverItsThreads) {
  Scratch s;
  for (const int threads : {1, 63}) {
    SCOPED_TRACE(threads);
    const auto result =
        run("TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_SAMPLE_HZ=1000 TRAINSHIM_SAMPLE_BUDGET_US=1000000 " +
            preload_env(s.job) + " " + program("host_resources_prog") + " proc_files " + std::to_string(threads));
    for (const std::string& segment : segments_of(s.job)) unlink(segment.c_str());
    ASSERT_EQ(result.exit_code, 0) << result.out;
    int most = -1;
    ASSERT_EQ(std::sscanf(result.out.c_str(), "most %d", &most), 1) << result.out;
    EXPECT_GE(most, 1);
    EXPECT_LE(most, 3);
  }
}

TEST(HostProcess, NumbersOutOfRangeInTheEnvironmentGetTheDefaultAndAWarning) {
  Scratch s;
  const auto result = run_with_messages("TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_RING_EVENTS=-1 TRAINSHIM_RINGS=1e3 "
                                        "TRAINSHIM_SIDE_RECORDS=99999999999999999999 "
                                        "TRAINSHIM_FIRST_RING_EVENTS=4194305 " +
                                        preload_env(s.job) + " " + program("host_copies_prog") + " 10 1");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(occurrences(result.out, "trainshim: TRAINSHIM_RINGS=\"1e3\" is not a whole number from 1 to 256: using "
                                    "the default 8\n"),
            1)
      << result.out;
  EXPECT_EQ(occurrences(result.out, "trainshim: TRAINSHIM_RING_EVENTS=\"-1\" is not a whole number from 1 to "
                                    "4194304: using the default 16384\n"),
            1)
      << result.out;
  EXPECT_EQ(occurrences(result.out, "trainshim: TRAINSHIM_SIDE_RECORDS=\"99999999999999999999\" is not a whole "
                                    "number from 1 to 65536: using the default 2048\n"),
            1)
      << result.out;
  EXPECT_EQ(occurrences(result.out, "trainshim: TRAINSHIM_FIRST_RING_EVENTS=\"4194305\" is not a whole number from 1 "
                                    "to 4194304: using the default 131072\n"),
            1)
      << result.out;
  EXPECT_EQ(occurrences(result.out, "trainshim:"), 4) << result.out;

  // The geometry the process used.
  SegmentHeader header{};
  ASSERT_TRUE(take_only_segment(s.job, header));
  EXPECT_EQ(header.ring_count, 8u);
  EXPECT_EQ(header.first_ring_capacity, 131072u);
  EXPECT_EQ(header.ring_capacity, 16384u);
  EXPECT_EQ(header.side_capacity, 2048u);
  EXPECT_EQ(header.segment_bytes, 25'708'864u);
}

TEST(HostProcess, ValidNumbersInTheEnvironmentAreUsedSilently) {
  Scratch s;
  const auto result = run_with_messages("TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_RING_EVENTS=1000 TRAINSHIM_RINGS=3 "
                                        "TRAINSHIM_SIDE_RECORDS=64 TRAINSHIM_FIRST_RING_EVENTS=5000 " +
                                        preload_env(s.job) + " " + program("host_copies_prog") + " 10 1");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "done 1 x 10\n");
  SegmentHeader header{};
  ASSERT_TRUE(take_only_segment(s.job, header));
  EXPECT_EQ(header.ring_count, 3u);
  EXPECT_EQ(header.first_ring_capacity, 8192u);  // rounded up to a power of two
  EXPECT_EQ(header.ring_capacity, 1024u);
  EXPECT_EQ(header.side_capacity, 64u);
  EXPECT_EQ(header.segment_bytes, segment_bytes(3, 8192, 1024, 64));
}

// Rings asked larger than the first ring's default make the first ring as large; a first ring
// asked smaller than the others is used as asked.
TEST(HostProcess, TheFirstRingIsNeverSmallerThanTheOthersUnlessAsked) {
  for (const std::string first : {"", "16"}) {
    SCOPED_TRACE("TRAINSHIM_FIRST_RING_EVENTS=" + first);
    Scratch s;
    const auto result =
        run_with_messages("TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_RINGS=2 TRAINSHIM_RING_EVENTS=131072 "
                          "TRAINSHIM_FIRST_RING_EVENTS=" +
                          first + " " + preload_env(s.job) + " " + program("host_copies_prog") + " 10 1");
    ASSERT_EQ(result.exit_code, 0) << result.out;
    EXPECT_EQ(result.out, "done 1 x 10\n");
    SegmentHeader header{};
    ASSERT_TRUE(take_only_segment(s.job, header));
    EXPECT_EQ(header.first_ring_capacity, first.empty() ? 131072u : 16u);
    EXPECT_EQ(header.ring_capacity, 131072u);
  }
}

// The program unloads the runtime the shim forwarded to and loads another file of the same soname.
TEST(HostProcess, RuntimeUnloadedAndAnotherLoadedKeepsTheJobRunning) {
  const std::string command = program("reload_runtime_prog") + " " + std::string(Paths::stub_cudart) +
                              "/libcudart.so.13 " + std::string(Paths::simcuda) + "/libcudart.so.13";
  ASSERT_EQ(run(command).out, "first copy 0\nsecond copy 0\n");
  Scratch s;
  const auto result = run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " + command);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "first copy 0\nsecond copy 0\n");
  // Both went to the first runtime, which stays mapped once the shim forwarded to it.
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync", "result = 0 AND bytes = 64"), 2);
}

TEST(HostProcess, ProgramWithOptionalCudaAndNoRuntimeTakesItsCpuPath) {
  const std::string command = program("optional_cuda_prog");
  ASSERT_EQ(run(command).out, "no CUDA runtime linked: running on CPU\n");
  Scratch s;
  const auto result = run_with_messages(preload_env(s.job) + " " + command);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  // The hooks answer its weak references (an exported symbol cannot be withdrawn), then answer as
  // a runtime without a driver: the program runs on the CPU, and trainshim stays inert.
  EXPECT_EQ(result.out, "no usable CUDA device: running on CPU\n");
  EXPECT_TRUE(segments_of(s.job).empty());
}

TEST(HostProcess, ProgramWithOptionalCudaLinkedWithTheRuntimeIsRecorded) {
  Scratch s;
  const auto result =
      run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " + program("optional_cuda_linked_prog"));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "ran on the GPU\n");
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy", "result = 0 AND direction = 1 AND host_memory = 2 AND bytes = 256"), 3);
  EXPECT_EQ(count_api(s.db(), "cudaDeviceSynchronize", "result = 0"), 1);
  EXPECT_EQ(count_api(s.db(), "cudaFree", "result = 0"), 2);
}

}  // namespace
}  // namespace trainshim::test
