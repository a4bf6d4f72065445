// The driver API end to end on the simulated libcuda.so.1: the same training loop with its driver
// functions taken by name, through cuGetProcAddress and through cudaGetDriverEntryPoint is
// recorded call for call at the same lines; a runtime call and the driver call it makes are one
// recorded call.
#include <gtest/gtest.h>

#include "harness.hpp"

namespace trainshim::test {
namespace {

using nlohmann::json;

const std::string kCalls = std::string(Paths::source) + "/tests/programs/driver_calls.cpp";
const std::string kMixed = std::string(Paths::source) + "/tests/programs/driver_mixed.cpp";

json run_report(const Scratch& s, const std::string& command) {
  const auto result = run(trainshim_cli() + " run --json --out " + s.db() + " -- " + command);
  EXPECT_EQ(result.exit_code, 0) << result.out;
  const auto brace = result.out.find('{');
  if (brace == std::string::npos) return json::object();
  return json::parse(result.out.substr(brace));
}

void expect_copy(const json& rank, const std::string& direction, const std::string& memory, int calls, int bytes) {
  const json row = find_row(rank.at("copies"), {{"direction", direction}, {"host_memory", memory}});
  ASSERT_FALSE(row.is_null()) << direction << "/" << memory << " missing in " << rank.at("copies").dump();
  EXPECT_EQ(row.at("calls"), calls) << direction << "/" << memory;
  EXPECT_EQ(row.at("bytes"), bytes) << direction << "/" << memory;
}

// The explicit-sync site of `operation` in `source`: at the marked line, with that many calls.
void expect_site(const json& rank, const std::string& operation, const std::string& source, const std::string& marker,
                 int calls) {
  const json site = find_row(rank.at("explicit_syncs"), {{"operation", operation}});
  ASSERT_FALSE(site.is_null()) << operation << " missing in " << rank.at("explicit_syncs").dump(1);
  EXPECT_TRUE(site.at("file").get<std::string>().ends_with(source.substr(source.rfind('/') + 1))) << site.at("file");
  EXPECT_EQ(site.at("line"), marked_line(source, marker)) << operation;
  EXPECT_EQ(site.at("calls"), calls) << operation;
}

class DriverCalls : public ::testing::TestWithParam<std::string> {};

TEST_P(DriverCalls, EveryCallIsCountedOnceAtItsLine) {
  Scratch s;
  const std::string mode = GetParam();
  const json report = run_report(s, program("driver_calls_prog") + " " + mode + " 4");
  ASSERT_EQ(report.at("ranks").size(), 1u);
  const json& rank = report.at("ranks")[0];

  // Per step: HtoD 1000 pageable; HtoDAsync 2000 from cuMemAllocHost memory and cuMemcpy 600 from
  // cuMemHostRegister'ed memory (pinned); DtoHAsync 300 pageable; DtoH 400 pinned; DtoD 500.
  ASSERT_EQ(rank.at("copies").size(), 5u) << rank.at("copies").dump(1);
  expect_copy(rank, "h2d", "pageable", 4, 4 * 1000);
  expect_copy(rank, "h2d", "pinned", 8, 4 * (2000 + 600));
  expect_copy(rank, "d2h", "pageable", 4, 4 * 300);
  expect_copy(rank, "d2h", "pinned", 4, 4 * 400);
  expect_copy(rank, "d2d", "device", 4, 4 * 500);
  const std::string db = s.db();
  EXPECT_EQ(count_api(db, "cuMemcpyHtoD_v2"), 4);
  EXPECT_EQ(count_api(db, "cuMemcpyHtoDAsync_v2"), 4);
  EXPECT_EQ(count_api(db, "cuMemcpyDtoHAsync_v2"), 4);
  EXPECT_EQ(count_api(db, "cuMemcpyDtoH_v2"), 4);
  EXPECT_EQ(count_api(db, "cuMemcpyDtoD_v2"), 4);
  EXPECT_EQ(count_api(db, "cuMemcpy"), 4);
  // The records themselves (direction 1: h2d; host_memory 1: pinned, 2: pageable).
  EXPECT_EQ(count_api(db, "cuMemcpyHtoD_v2", "direction = 1 AND host_memory = 2 AND bytes = 1000"), 4);
  EXPECT_EQ(count_api(db, "cuMemcpy", "direction = 1 AND host_memory = 1 AND bytes = 600"), 4);
  EXPECT_EQ(count_api(db, "cuStreamSynchronize"), 4);
  EXPECT_EQ(count_api(db, "cuCtxSynchronize"), 4);
  EXPECT_EQ(count_api(db, "cuStreamQuery"), 4);
  EXPECT_EQ(count_api(db, "cuMemFree_v2"), 2);
  EXPECT_EQ(count_api(db, "cuMemAllocHost_v2"), 1);
  EXPECT_EQ(count_api(db, "cuMemHostRegister_v2"), 1);
  EXPECT_EQ(count_api(db, "cuMemFreeHost"), 1);
  EXPECT_EQ(count_api(db, "cuMemHostUnregister"), 1);
  // Only cuGetProcAddress is asked for a per-thread twin.
  const bool proc = mode == "proc" || mode == "bootproc" || mode == "bootentry";
  EXPECT_EQ(count_api(db, "cuStreamSynchronize_ptsz"), proc ? 4 : 0);
  EXPECT_EQ(count_api(db, "cuCtxSynchronize_v2"), 0) << "CUDA 12's cuCtxSynchronize was asked for";

  // The sites, by the lines of the loop, whichever way the functions were taken.
  expect_site(rank, "cuStreamSynchronize()", kCalls, "DRIVER_STREAM_SYNC", 4);
  expect_site(rank, "cuCtxSynchronize()", kCalls, "DRIVER_CTX_SYNC", 4);
  expect_site(rank, "cuMemcpyHtoD_v2()", kCalls, "DRIVER_H2D_PAGEABLE", 4);
  expect_site(rank, "cuMemcpyDtoHAsync_v2()", kCalls, "DRIVER_D2H_PAGEABLE", 4);
  const json free_site = find_row(rank.at("explicit_syncs"), {{"line", marked_line(kCalls, "DRIVER_FREE")}});
  ASSERT_FALSE(free_site.is_null()) << rank.at("explicit_syncs").dump(1);
  EXPECT_EQ(free_site.at("operation"), "cuMemFree_v2()");
  EXPECT_EQ(free_site.at("calls"), 1);
  if (proc) expect_site(rank, "cuStreamSynchronize_ptsz()", kCalls, "DRIVER_PTSZ_SYNC", 4);
  // Device-to-device and asynchronous copies from pinned memory never make the host wait.
  for (const char* not_a_wait : {"cuMemcpyDtoD_v2()", "cuMemcpyHtoDAsync_v2()"})
    EXPECT_TRUE(find_row(rank.at("explicit_syncs"), {{"operation", not_a_wait}}).is_null()) << not_a_wait;
  EXPECT_TRUE(find_row(rank.at("hidden_syncs"), {{"operation", "cuMemcpyDtoD_v2()"}}).is_null());
}

// bootproc, bootentry: through a cuGetProcAddress taken itself through cuGetProcAddress or
// cudaGetDriverEntryPoint (issue 23: its lookups were the real driver's, none recorded).
INSTANTIATE_TEST_SUITE_P(TakenEachWay, DriverCalls,
                         ::testing::Values("direct", "proc", "entry", "bootproc", "bootentry"));

// Under each cudaMemcpy and cudaStreamSynchronize the runtime calls the driver's cuMemcpy and
// cuStreamSynchronize. Taken by handle, as libcudart takes them, they never reach the hooks;
// taken from the global scope (SIMCUDA_DRIVER_LOOKUP=global), they are the hooks, called while the
// runtime call's hook is recording, and its busy guard keeps them out.
class MixedCalls : public ::testing::TestWithParam<std::string> {};

TEST_P(MixedCalls, ARuntimeCallIsNotCountedAgainAsADriverCall) {
  Scratch s;
  const std::string lookup = GetParam();
  const auto result = run("SIMCUDA_DRIVER_LOOKUP=" + lookup + " " + trainshim_cli() + " run --json --out " + s.db() +
                          " -- " + program("driver_mixed_prog") + " 3");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_NE(result.out.find("global cuGetProcAddress_v2 is trainshim's: yes"), std::string::npos) << result.out;
  const json report = json::parse(result.out.substr(result.out.find('{')));
  const json& rank = report.at("ranks")[0];
  const std::string db = s.db();
  EXPECT_EQ(count_api(db, "cudaMemcpy"), 3);
  EXPECT_EQ(count_api(db, "cuMemcpy"), 0);
  EXPECT_EQ(count_api(db, "cudaStreamSynchronize"), 3);
  EXPECT_EQ(count_api(db, "cuStreamSynchronize"), 3) << "the program's own three, none of the runtime's";
  EXPECT_EQ(count_api(db, "cuEventSynchronize"), 3);
  ASSERT_EQ(rank.at("copies").size(), 1u) << rank.at("copies").dump(1);
  expect_copy(rank, "h2d", "pageable", 3, 3 * 4096);
  expect_site(rank, "cudaStreamSynchronize()", kMixed, "MIXED_RUNTIME_SYNC", 3);
  expect_site(rank, "cuStreamSynchronize()", kMixed, "MIXED_DRIVER_SYNC", 3);
  expect_site(rank, "cuEventSynchronize()", kMixed, "MIXED_EVENT_SYNC", 3);
}

INSTANTIATE_TEST_SUITE_P(DriverTakenEachWay, MixedCalls, ::testing::Values("handle", "global"));

}  // namespace
}  // namespace trainshim::test
