// The shim never disturbs the job: graph captures end as they would without it, and every hooked
// call leaves the thread's last error as it would be without it.
#include <gtest/gtest.h>

#include "harness.hpp"

namespace trainshim::test {
namespace {

// Only the poller's event queries run during the captures here.
TEST(Safety, PollerNeverInvalidatesAGlobalCaptureOfTheProgram) {
  const std::string command = program("capture_collectives_prog") + " 50 pinned-only";
  ASSERT_EQ(run(command).out, "captures=50\n");
  Scratch s;
  const auto shimmed = run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " + command);
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.out;
  EXPECT_EQ(shimmed.out, "captures=50\n");
  EXPECT_EQ(count_api(s.db(), "ncclGpuTiming"), 50);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync", "direction = 1 AND host_memory = 1 AND bytes = 4096"), 500);
}

TEST(Safety, GraphCaptureNextToTimedCollectivesEndsAsWithoutTheShim) {
  const std::string command = program("capture_collectives_prog") + " 50";
  const auto plain = run(command);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(plain.out, "captures=50\n");
  Scratch s;
  const auto shimmed = run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " + command);
  ASSERT_EQ(shimmed.exit_code, 0) << shimmed.out;
  EXPECT_EQ(shimmed.out, "captures=50\n");
  // The all-reduces were not captured: every one is timed.
  EXPECT_EQ(count_api(s.db(), "ncclAllReduce"), 50);
  EXPECT_EQ(count_api(s.db(), "ncclGpuTiming"), 50);
  EXPECT_EQ(query_int(s.db(), "SELECT untimed_capturing + untimed_no_event FROM processes"), 0);
  // Captured copies: the pinned table still answers; the runtime is not asked about the others.
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync", "direction = 1 AND host_memory = 1 AND bytes = 4096"), 500);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync", "direction = 0 AND host_memory = 0 AND bytes = 4096"), 500);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyAsync"), 1000);
}

TEST(Safety, CollectivesOnTwoDevicesAreTimedAndLeaveNoError) {
  Scratch s;
  const auto result = run("SIMCUDA_DEVICES=2 " + trainshim_cli() + " run --no-report --out " + s.db() + " -- " +
                          program("error_safety_prog") + " devices");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "ok\n");
  EXPECT_EQ(count_api(s.db(), "ncclAllReduce"), 10);
  EXPECT_EQ(count_api(s.db(), "ncclAllReduce", "result = 0"), 10);
  EXPECT_EQ(count_api(s.db(), "ncclGpuTiming"), 10);
  EXPECT_EQ(query_int(s.db(), "SELECT untimed_no_event FROM processes"), 0);
}

// Review round 2, §1: a program that closes every descriptor it did not open and reuses the
// numbers had its own files closed by the shim, when a sampled thread exited or in a forked child.
class OwnDescriptors : public ::testing::TestWithParam<std::string> {};

TEST_P(OwnDescriptors, TheShimNeverClosesTheProgramsDescriptors) {
  Scratch s;
  s.segments_left = true;  // no collector
  const auto result =
      run(preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 " + program("own_descriptors_prog") + " " + GetParam());
  EXPECT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "0 of 16 closed\n");
}

INSTANTIATE_TEST_SUITE_P(Safety, OwnDescriptors, ::testing::Values("thread_exit", "fork"));

// Review round 2, §5: closing every descriptor drops the shim's liveness lock too; the collector
// took the process for dead, unlinked its segment, and the rest was lost uncounted.
TEST(Safety, AProcessThatDroppedItsLivenessLockIsStillCollectedToItsEnd) {
  Scratch s;
  const auto result =
      run("TRAINSHIM_SAMPLE_HZ=0 TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --no-report --out " + s.db() +
          " -- " + program("own_descriptors_prog") + " copies 1000");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy"), 1100);
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
  EXPECT_EQ(query_int(s.db(), "SELECT dropped_ring_full + dropped_not_ready + lost_unpublished FROM processes"), 0);
}

TEST(Safety, ErrorTheProgramLeftPendingSurvivesEveryHookedCall) {
  Scratch s;
  const auto result = run("SIMCUDA_DEVICES=2 " + trainshim_cli() + " run --no-report --out " + s.db() + " -- " +
                          program("error_safety_prog") + " pending");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(result.out, "ok\n");
  // While the error is pending the shim calls nothing: those collectives are not timed.
  EXPECT_EQ(count_api(s.db(), "ncclAllReduce"), 10);
  EXPECT_EQ(count_api(s.db(), "ncclGpuTiming"), 3);
  EXPECT_EQ(query_int(s.db(), "SELECT untimed_no_event FROM processes"), 7);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy", "direction = 1 AND bytes = 1024"), 1);
}

// The program links no CUDA library; the library it loads with RTLD_LOCAL links libcudart under a
// hashed name. Neither RTLD_NEXT nor a soname finds it: only what it exports does.
TEST(Safety, HashedCudartInALocalScopeIsFoundByWhatItExports) {
  Scratch s;
  const auto result = run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " + program("local_scope_prog") +
                          " " + program("liblocal_scope_lib_hashed.so"));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy", "result = 0 AND direction = 1 AND host_memory = 2 AND bytes = 256"), 7);
  EXPECT_EQ(count_api(s.db(), "cudaStreamSynchronize", "result = 0"), 1);
}

// NCCL linked into the library that calls it, loaded with RTLD_LOCAL: the hook forwards to that
// library's pncclX, or, built without them, to its ncclX.
TEST(Safety, StaticNcclInALocalScopeLibraryIsForwardedToItsOwnDefinitions) {
  for (const std::string library : {"libstatic_nccl_lib.so", "libstatic_nccl_noprof_lib.so"}) {
    SCOPED_TRACE(library);
    Scratch s;
    const auto result = run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " +
                            program("local_scope_prog") + " " + program(library) + " all_reduce_from_local_scope");
    ASSERT_EQ(result.exit_code, 0) << result.out;
    EXPECT_EQ(count_api(s.db(), "ncclAllReduce", "result = 0 AND bytes = 1024"), 7);
    EXPECT_EQ(count_api(s.db(), "ncclCommInitRank", "result = 0 AND comm_size = 1"), 1);
    EXPECT_EQ(count_api(s.db(), "ncclGpuTiming"), 7);
  }
}

TEST(Safety, SymbolThreeDimensionalAndBatchCopiesAreCountedExactly) {
  Scratch s;
  const auto result = run(trainshim_cli() + " run --json --out " + s.db() + " -- " + program("more_copies_prog"));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const nlohmann::json report = nlohmann::json::parse(result.out);
  const nlohmann::json& copies = report.at("ranks")[0].at("copies");
  auto expect = [&](const std::string& direction, const std::string& memory, int calls, int bytes) {
    const nlohmann::json row = find_row(copies, {{"direction", direction}, {"host_memory", memory}});
    ASSERT_FALSE(row.is_null()) << direction << "/" << memory << " missing in " << copies.dump();
    EXPECT_EQ(row.at("calls"), calls) << direction << "/" << memory;
    EXPECT_EQ(row.at("bytes"), bytes) << direction << "/" << memory;
  };
  EXPECT_EQ(copies.size(), 6u) << copies.dump();
  expect("h2d", "pageable", 4, 4000);
  expect("h2d", "pinned", 3, 640);
  expect("d2d", "device", 2, 320);
  expect("d2h", "pageable", 5, 1000);
  expect("d2h", "pinned", 2, 384);
  expect("none", "unknown", 2, 630);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyFromSymbol", "result = 0"), 3);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpyBatchAsync_ptsz", "bytes = 30"), 1);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy3D_ptds", "direction = 1 AND host_memory = 1 AND bytes = 64"), 1);
}

}  // namespace
}  // namespace trainshim::test
