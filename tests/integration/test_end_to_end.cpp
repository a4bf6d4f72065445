// Whole runs: real processes, the preloaded shim, the collector and the CLI, on simcuda.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "harness.hpp"
#include "trainshim/names.hpp"

namespace trainshim::test {
namespace {

using nlohmann::json;

std::string simrun() { return std::string(Paths::source) + "/scripts/simrun"; }

bool segment_exists(const std::string& job) {
  for (const auto& e : std::filesystem::directory_iterator(std::string(kShmDir)))
    if (e.path().filename().string().starts_with(segment_prefix(getuid(), job))) return true;
  return false;
}

void expect_copy(const json& rank, const std::string& direction, const std::string& memory, int calls, int bytes) {
  const json row = find_row(rank.at("copies"), {{"direction", direction}, {"host_memory", memory}});
  ASSERT_FALSE(row.is_null()) << direction << "/" << memory << " missing in " << rank.dump();
  EXPECT_EQ(row.at("calls"), calls) << direction << "/" << memory;
  EXPECT_EQ(row.at("bytes"), bytes) << direction << "/" << memory;
}

void expect_sync(const json& rank, const std::string& api, int calls) {
  const json row = find_row(rank.at("syncs"), {{"api", api}});
  ASSERT_FALSE(row.is_null()) << api << " missing in " << rank.dump();
  EXPECT_EQ(row.at("calls"), calls) << api;
}

// tests/programs/accounting.cpp on four ranks: each rank's figures are the program's calls.
TEST(EndToEnd, CppJobAcrossFourRanksIsCountedExactly) {
  Scratch s;
  const auto result = run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --json --out " + s.db() + " -- " +
                          simrun() + " -n 4 -- " + program("accounting_prog"));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json report = json::parse(result.out);
  EXPECT_EQ(report.at("format"), "trainshim-report/1");
  ASSERT_EQ(report.at("ranks").size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json& r = rank_entry(report, rank);
    EXPECT_EQ(r.at("world_size"), 4);
    EXPECT_EQ(r.at("copies").size(), 4u);
    expect_copy(r, "h2d", "pageable", 10, 10 * 4096);  // cudaMemcpy from the std::vector
    expect_copy(r, "h2d", "pinned", 5, 5 * 8192);      // cudaMemcpyAsync from cudaMallocHost memory
    expect_copy(r, "d2h", "pageable", 3, 3 * 1000);    // cudaMemcpyAsync into the std::vector
    expect_copy(r, "d2d", "device", 2, 2 * 16 * 4);    // cudaMemcpy2D: width 16 bytes x height 4
    EXPECT_EQ(r.at("syncs").size(), 3u);
    // 4 in the loop, and 1 after the all-reduces: only a job of more than one rank makes them.
    expect_sync(r, "cudaStreamSynchronize", 5);
    expect_sync(r, "cudaDeviceSynchronize", 1);
    // cudaFree waits for the device (a sync): the two device buffers. cudaFreeHost is no sync.
    expect_sync(r, "cudaFree", 2);
    ASSERT_EQ(r.at("collectives").size(), 1u);
    EXPECT_EQ(r.at("collectives")[0].at("op"), "all_reduce");
    EXPECT_EQ(r.at("collectives")[0].at("calls"), 6);
    EXPECT_EQ(r.at("collectives")[0].at("bytes"), 6 * 256 * 4);  // 256 floats each
    EXPECT_EQ(r.at("dropped_events"), 0);
  }
  const json totals = report.at("totals");
  EXPECT_EQ(find_row(totals.at("copies"), {{"direction", "h2d"}, {"host_memory", "pageable"}}).at("calls"), 40);
  // One pageable finding per rank and direction: 4 ranks x (h2d, d2h).
  int pageable_findings = 0;
  for (const auto& f : report.at("findings")) pageable_findings += f.at("kind") == "pageable_copy";
  EXPECT_EQ(pageable_findings, 8);
  EXPECT_FALSE(segment_exists(s.job)) << "drained segments must be removed";
  EXPECT_FALSE(std::filesystem::exists(collector_lock_path(getuid(), s.job)));
}

TEST(EndToEnd, PythonJobThroughCtypesIsCountedExactly) {
  Scratch s;
  const auto result = run("TRAINSHIM_JOB=" + s.job + " " + trainshim_cli() + " run --json --out " + s.db() + " -- " +
                          simrun() + " -n 4 -- python3 " + Paths::source + "/tests/python/accounting.py");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json report = json::parse(result.out);
  ASSERT_EQ(report.at("ranks").size(), 4u);
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json& r = rank_entry(report, rank);
    EXPECT_EQ(r.at("copies").size(), 3u);
    expect_copy(r, "h2d", "pageable", 8, 8 * 1000);
    expect_copy(r, "h2d", "pinned", 4, 4 * 2048);
    expect_copy(r, "d2h", "pageable", 2, 2 * 512);
    expect_sync(r, "cudaStreamSynchronize", 4);
    expect_sync(r, "cudaDeviceSynchronize", 2);
    EXPECT_EQ(find_row(r.at("collectives"), {{"op", "all_reduce"}}).at("calls"), 3);
    EXPECT_EQ(find_row(r.at("collectives"), {{"op", "all_reduce"}}).at("bytes"), 3 * 64 * 4);
    EXPECT_EQ(r.at("dropped_events"), 0);
  }
}

TEST(EndToEnd, RunReturnsTheCommandsExitCodeAndPrintsTheTextReport) {
  Scratch s;
  EXPECT_EQ(run(trainshim_cli() + " run --out " + s.db() + " -- sh -c 'exit 7'").exit_code, 7);
  const auto result = run(trainshim_cli() + " run --out " + s.db() + " -- " + program("probe_prog") + " mode");
  EXPECT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("mode=600"), std::string::npos) << "segments are owner-only: " << result.out;
  EXPECT_NE(result.out.find("h2d    pageable             1       100 B"), std::string::npos) << result.out;
}

// A command that makes no CUDA call (a typo, a launcher that failed) leaves no empty database to be
// mistaken for a run, and says so; a database that was there before is left as it was.
TEST(EndToEnd, RunOfACommandWithNoCudaCallLeavesNoDatabase) {
  Scratch s;
  const auto nothing = run(trainshim_cli() + " run --out " + s.db() + " -- sh -c 'exit 7' 2>&1");
  EXPECT_EQ(nothing.exit_code, 7);
  EXPECT_EQ(nothing.out, "trainshim: sh made no CUDA call: nothing was recorded, no database was written\n");
  EXPECT_FALSE(std::filesystem::exists(s.db()));
  ASSERT_EQ(
      run(trainshim_cli() + " run --no-report --out " + s.db() + " -- " + program("probe_prog") + " mode").exit_code,
      0);
  const int64_t processes = query_int(s.db(), "SELECT count(*) FROM processes");
  ASSERT_GT(processes, 0);
  EXPECT_EQ(run(trainshim_cli() + " run --no-report --out " + s.db() + " -- true").exit_code, 0);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), processes);
}

TEST(EndToEnd, LibraryLoadedIntoALocalScopeIsStillInterposed) {
  Scratch s;
  const auto result = run(trainshim_cli() + " run --json --out " + s.db() + " -- " + program("local_scope_prog") + " " +
                          program("liblocal_scope_lib.so"));
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json report = json::parse(result.out);
  ASSERT_EQ(report.at("ranks").size(), 1u);
  expect_copy(report.at("ranks")[0], "h2d", "pageable", 7, 7 * 256);
  expect_sync(report.at("ranks")[0], "cudaStreamSynchronize", 1);
}

TEST(EndToEnd, RealCudartWithoutDriverIsInterposed) {
  Scratch s;
  // The program's RUNPATH finds the toolkit's libcudart.so.13; it must not see simcuda.
  const auto result = run("env -u LD_LIBRARY_PATH " + trainshim_cli() + " run --out " + s.db() + " --no-report -- " +
                          program("real_cudart_prog"));
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_NE(result.out.find("failed calls: 6"), std::string::npos) << "not the real runtime? " << result.out;
  EXPECT_EQ(query_int(s.db(), "SELECT sum(count) FROM calls"), 6);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM (SELECT result FROM events UNION ALL SELECT result FROM "
                              "recent_events) WHERE result = 35"),
            6);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy"), 4);
}

TEST(EndToEnd, ProcessWithoutCudaCallsCreatesNothing) {
  Scratch s;
  const auto result = run(preload_env(s.job) + " " + program("probe_prog") + " inert");
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(result.out, "threads=1 segment=no\n");
  EXPECT_FALSE(segment_exists(s.job));
  EXPECT_FALSE(std::filesystem::exists(collector_lock_path(getuid(), s.job)));
  // A program with no CUDA library at all loads the shim too: it links only the C library.
  const auto plain = run(preload_env(s.job) + " /bin/echo loaded 2>&1");
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_EQ(plain.out, "loaded\n");
  EXPECT_FALSE(segment_exists(s.job));
}

TEST(EndToEnd, ForkedChildStartsClean) {
  Scratch s;
  // No sampler: its records would count in `events` where a loaded machine lets it tick.
  const auto result = run("TRAINSHIM_JOB=" + s.job + " TRAINSHIM_SAMPLE_HZ=0 " + trainshim_cli() +
                          " run --no-report --out " + s.db() + " -- " + program("probe_prog") + " fork");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  int allocating = 0, quiet = 0;
  ASSERT_EQ(std::sscanf(result.out.c_str(), "allocating=%d quiet=%d", &allocating, &quiet), 2) << result.out;
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM processes"), 2) << "the quiet child must record nothing";
  EXPECT_EQ(query_int(s.db(), "SELECT events FROM processes WHERE pid = " + std::to_string(allocating)), 2);
  EXPECT_EQ(query_int(s.db(), "SELECT coalesce(sum(c.count), 0) FROM calls c JOIN processes p ON p.id = c.process_id "
                              "JOIN apis a ON a.id = c.api WHERE p.pid = " +
                                  std::to_string(allocating) + " AND a.class = 'copy'"),
            0)
      << "the parent's copies must not appear in the child's segment";
  EXPECT_EQ(query_int(s.db(), "SELECT sum(c.count) FROM calls c JOIN processes p ON p.id = c.process_id JOIN apis a "
                              "ON a.id = c.api WHERE p.pid <> " +
                                  std::to_string(allocating) + " AND a.name = 'cudaMemcpy'"),
            4);
}

TEST(EndToEnd, EventsOfAKilledProcessSurviveAndAreCollectedLater) {
  Scratch s;
  const auto killed = run(preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 " + program("probe_prog") + " killed");
  EXPECT_EQ(killed.exit_code, 128 + 9);
  ASSERT_TRUE(segment_exists(s.job)) << "with no collector the events wait in shared memory";
  const auto collect = run(trainshim_cli() + " collect --job " + s.job + " --out " + s.db() + " --idle-exit 0.2");
  ASSERT_EQ(collect.exit_code, 0);
  EXPECT_EQ(count_api(s.db(), "cudaMemcpy"), 50);
  EXPECT_EQ(query_int(s.db(), "SELECT ended FROM processes"), 1);
  EXPECT_FALSE(segment_exists(s.job));
}

TEST(EndToEnd, OnDemandCollectorStartsExactlyOncePerJob) {
  Scratch s;
  // Every record a hooked call's: the sampler's own records (counted as records too) are off.
  const auto result = run("cd " + s.dir + " && " + preload_env(s.job) + " TRAINSHIM_SAMPLE_HZ=0 " + simrun() +
                          " -n 4 -- " + program("accounting_prog"));
  ASSERT_EQ(result.exit_code, 0);
  // The collector exits on its own once every rank is gone and drained; wait for it (bounded).
  const std::string lock = collector_lock_path(getuid(), s.job);
  for (int i = 0; i < 600 && std::filesystem::exists(lock); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(std::filesystem::exists(lock)) << "the collector did not exit";
  const std::string db = s.dir + "/trainshim-" + s.job + ".db";
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM collector_log WHERE message LIKE 'collector % started%'"), 1);
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM processes"), 4);
  // Per rank: 20 copies, 6 syncs, 2 cudaFree, 6 all-reduces and their 6 GPU timings, init +
  // destroy, host alloc + free.
  EXPECT_EQ(query_int(db, "SELECT sum(events) FROM processes"),
            4 * (10 + 5 + 3 + 2 + 5 + 1 + 2 + 6 + 6 + 1 + 1 + 1 + 1));
  EXPECT_EQ(query_int(db, "SELECT count(DISTINCT object || '/' || sequence) FROM events e JOIN apis a ON a.id = e.api "
                          "WHERE a.class = 'collective' AND e.gpu_ns IS NOT NULL"),
            6)
      << "the same six all-reduces, matched across the four ranks by communicator and sequence";
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api WHERE a.class = 'collective' AND "
                          "e.gpu_ns IS NOT NULL"),
            4 * 6)
      << "every all-reduce's timing in its row";
  EXPECT_EQ(query_int(db, "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api WHERE a.name = 'ncclGpuTiming'"),
            0)
      << "no timing kept as a row of its own";
  EXPECT_EQ(count_api(db, "ncclGpuTiming"), 4 * 6) << "each counted";
  EXPECT_FALSE(segment_exists(s.job));
}

TEST(EndToEnd, JobRunsUnchangedWhenTheCollectorCannotStart) {
  Scratch s;
  const auto result = run(preload_env(s.job) + " TRAINSHIM_COLLECTOR=/nonexistent/trainshim-collector " + simrun() +
                          " -n 2 -- " + program("accounting_prog"));
  ASSERT_EQ(result.exit_code, 0);
  ASSERT_TRUE(segment_exists(s.job));
  ASSERT_EQ(run(trainshim_cli() + " collect --job " + s.job + " --out " + s.db() + " --idle-exit 0.2").exit_code, 0);
  const auto report = run(trainshim_cli() + " report --json " + s.db());
  ASSERT_EQ(report.exit_code, 0);
  const json doc = json::parse(report.out);
  ASSERT_EQ(doc.at("ranks").size(), 2u);
  expect_copy(rank_entry(doc, 1), "h2d", "pageable", 10, 10 * 4096);
}

TEST(Cli, BadInputGetsAClearMessageAndExitCode2) {
  Scratch s;
  auto missing = run(trainshim_cli() + " report " + s.dir + "/absent.db 2>&1");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.out.find("no such database"), std::string::npos) << missing.out;
  const std::string garbage = s.dir + "/garbage.db";
  run("head -c 4096 /dev/urandom > " + garbage);
  auto corrupt = run(trainshim_cli() + " report " + garbage + " 2>&1");
  EXPECT_EQ(corrupt.exit_code, 2);
  EXPECT_NE(corrupt.out.find("not a trainshim database"), std::string::npos) << corrupt.out;
  EXPECT_EQ(run(trainshim_cli() + " frobnicate 2>/dev/null").exit_code, 2);
  EXPECT_EQ(run(trainshim_cli() + " run 2>/dev/null").exit_code, 2);
}

}  // namespace
}  // namespace trainshim::test
