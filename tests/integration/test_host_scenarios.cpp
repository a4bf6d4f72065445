// What the host was doing, end to end: planted jobs (tests/python/host_*.py, tests/programs/
// host_straggler.cpp) on the simulated runtime and the PyTorch stand-in, run under the shim, its
// sampler and the collector, and `trainshim report --json` / `trainshim dump --json` checked
// against what each job planted: the straggler's sleeping line or system call, a slow loader's
// input wait per step (within 10 % of what the job measured of its own waits), hangs outside
// collectives and on a first collective with every named rank's stack, live stacks of a rank that
// holds the GIL forever, and the setup checklist against a prepared sysfs tree, an affinity and
// NCCL's environment; and a well-set-up job with none of these findings.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "harness.hpp"

namespace trainshim::test {
namespace {

using nlohmann::json;

std::string job_script(const std::string& name) { return std::string(Paths::source) + "/tests/python/" + name; }
std::string dataloader_source() {
  return std::string(Paths::source) + "/tests/torchlike/torch/utils/data/dataloader.py";
}

// Two ranks of `command` (a program and its arguments) under scripts/simrun.
std::string two_ranks(const std::string& command) {
  return std::string(Paths::source) + "/scripts/simrun -n 2 -- " + command;
}
std::string python_ranks(const std::string& script) { return two_ranks("python3 " + job_script(script)); }

// The environment of every planted job: the stand-in and the jobs' helpers importable, the
// job's own measurements in the scratch directory, two simulated devices.
std::string job_environment(const Scratch& s) {
  return "SIMCUDA_DEVICES=2 HOST_PLANT_OUT=" + s.dir + " PYTHONPATH=" + Paths::torchlike_site + ":" + Paths::source +
         "/tests/python ";
}

struct JobRun {
  json report;
  int exit_code = -1;
  std::string job_output;
};

// Runs `job` to its end under `trainshim run --json`; its standard output goes to a file.
JobRun run_job(const Scratch& s, const std::string& job, const std::string& env = "") {
  const std::string output = s.dir + "/job.out";
  const auto result = run(job_environment(s) + env + " " + trainshim_cli() + " run --json --out " + s.db() +
                          " -- sh -c 'exec \"$0\" \"$@\" >" + output + "' " + job);
  JobRun out;
  out.exit_code = result.exit_code;
  std::ifstream in(output);
  out.job_output.assign(std::istreambuf_iterator<char>(in), {});
  if (!result.out.empty()) out.report = json::parse(result.out);
  return out;
}

// A job that never ends, started in its own process group under `trainshim run --no-report`;
// ended with its group when the test is done with it.
class LiveJob {
 public:
  LiveJob(const Scratch& s, const std::string& job, const std::string& env = "") : scratch_(s) {
    const auto started = run(job_environment(s) + env + " setsid " + trainshim_cli() + " run --no-report --out " +
                             s.db() + " -- " + job + " > " + s.dir + "/job.log 2>&1 & echo $!");
    leader_ = std::stoi(started.out);
  }
  // The ranks are ended, not `trainshim run`: simrun then ends the others and exits, and
  // `trainshim run` sees its job end and stops its collector, which would outlive a killed
  // `trainshim run`. Whatever is left after ten seconds is killed with the group.
  ~LiveJob() {
    bool ranks_known = false;
    for (int rank = 0; rank < 2; ++rank)
      if (const pid_t pid = pid_of(rank); pid > 0) ranks_known = kill(pid, SIGTERM) == 0 || ranks_known;
    if (!ranks_known) kill(-leader_, SIGTERM);
    for (int i = 0; i < 100 && kill(leader_, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    kill(-leader_, SIGKILL);
  }
  // Until every rank wrote its .ready file (reached its planted hang or spin), or a minute.
  bool wait_until_ready(int ranks) const {
    for (int i = 0; i < 600; ++i) {
      int ready = 0;
      for (int r = 0; r < ranks; ++r)
        ready += std::filesystem::exists(scratch_.dir + "/rank" + std::to_string(r) + ".ready");
      if (ready == ranks) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  // The pid a rank wrote into its .ready file.
  pid_t pid_of(int rank) const {
    std::ifstream in(scratch_.dir + "/rank" + std::to_string(rank) + ".ready");
    pid_t pid = 0;
    in >> pid;
    return pid;
  }
  std::string log() const {
    std::ifstream in(scratch_.dir + "/job.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  const Scratch& scratch_;
  pid_t leader_ = 0;
};

// The live report's hangs, polled until one is there (or a minute passed).
json wait_for_hangs(const Scratch& s) {
  for (int i = 0; i < 120; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    if (!std::filesystem::exists(s.db())) continue;
    const auto live = run(trainshim_cli() + " report --json " + s.db());
    if (live.exit_code != 0) continue;
    json report = json::parse(live.out);
    if (!report.at("hangs").empty()) return report;
  }
  return nullptr;
}

// What the job measured for `name` on `rank`, in ns, one value per step.
std::vector<double> measured_ns(const Scratch& s, int rank, const std::string& name) {
  std::ifstream in(s.dir + "/rank" + std::to_string(rank) + ".json");
  std::vector<double> out;
  const json measured = json::parse(in);
  for (const auto& seconds : measured.at("intervals").at(name)) out.push_back(seconds.get<double>() * 1e9);
  return out;
}

::testing::AssertionResult within_10_percent(double actual, double expected) {
  if (std::abs(actual - expected) <= 0.10 * std::abs(expected)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << actual << " is not within 10 % of " << expected;
}

std::vector<json> findings_of(const json& report, const std::string& kind) {
  std::vector<json> out;
  for (const auto& f : report.at("findings"))
    if (f.at("kind") == kind) out.push_back(f);
  return out;
}
std::vector<json> findings_of(const json& report, const std::string& kind, int rank) {
  std::vector<json> out;
  for (const auto& f : findings_of(report, kind))
    if (f.value("rank", -1) == rank) out.push_back(f);
  return out;
}
std::vector<std::string> setup_finding_kinds(const json& report) {
  std::vector<std::string> out;
  for (const auto& f : report.at("findings"))
    if (f.at("kind").get<std::string>().starts_with("setup_")) out.push_back(f.at("kind"));
  return out;
}

// The report's setup item `item` of `rank`.
json setup_item(const json& report, int rank, const std::string& item) {
  return find_row(report.at("setup"), {{"rank", rank}, {"item", item}});
}

// The part of a hang's stacks text about `rank`: from its "rank N (pid" line to the next rank's.
std::string stack_of(const std::string& stacks, int rank) {
  const std::string head = "rank " + std::to_string(rank) + " (pid ";
  const auto begin = stacks.find(head);
  if (begin == std::string::npos) return "";
  const auto end = stacks.find("\nrank ", begin + head.size());
  return stacks.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// "file:line" of a frame as the stacks and sites print it, by the file's name.
std::string at(const std::string& file, int line) {
  return std::filesystem::path(file).filename().string() + ":" + std::to_string(line);
}

// Whether a stack's text has the frame "at function (<path>/file:line)" on a line of its own.
bool has_frame(const std::string& stack, const std::string& function, const std::string& file, int line) {
  std::istringstream lines(stack);
  for (std::string text; std::getline(lines, text);)
    if (text.find(fmt::format("at {} (", function)) != std::string::npos &&
        text.ends_with(fmt::format("/{})", at(file, line))))
      return true;
  return false;
}

constexpr int kSteps = 20;  // host_straggler's and host_straggler.cpp's steps

// (a) Rank 1 sleeps 40 ms per step in load_shard, with no CUDA call in its late window: the
// straggler is rank 1, and what it was doing is that function's sleeping line, in clock_nanosleep
// (CPython 3.11+'s time.sleep on Linux), in nearly all of its late samples.
TEST(HostScenarios, APythonStragglerIsNamedByItsSleepingLine) {
  Scratch s;
  const std::string script = job_script("host_straggler.py");
  const JobRun r = run_job(s, python_ranks("host_straggler.py"), "TRAINSHIM_SAMPLE_HZ=200");
  ASSERT_EQ(r.exit_code, 0) << r.job_output;
  ASSERT_TRUE(r.report.is_object());
  const json& waits = r.report.at("collective_waits");
  EXPECT_EQ(waits.at("matched"), kSteps);
  ASSERT_FALSE(waits.at("straggler").is_null()) << waits.dump(1);
  EXPECT_EQ(waits.at("straggler").at("rank"), 1);
  const json& doing = waits.at("straggler_doing");
  ASSERT_TRUE(doing.is_object()) << waits.dump(1);
  EXPECT_EQ(doing.at("rank"), 1);
  EXPECT_EQ(doing.at("thread"), "main");
  EXPECT_EQ(doing.at("function"), "load_shard");
  EXPECT_TRUE(doing.at("file").get<std::string>().ends_with("/host_straggler.py")) << doing.dump();
  EXPECT_EQ(doing.at("line"), marked_line(script, "# PLANTED sleep"));
  EXPECT_EQ(doing.at("state"), "sleeping");
  EXPECT_EQ(doing.at("syscall"), "clock_nanosleep");
  EXPECT_GE(doing.at("share").get<double>(), 0.8) << doing.dump();
  EXPECT_GT(doing.at("samples").get<int>(), 0) << doing.dump();
  const auto named = findings_of(r.report, "straggler", 1);
  ASSERT_EQ(named.size(), 1u) << r.report.at("findings").dump(1);
  const std::string advice = named[0].dump();
  EXPECT_NE(advice.find("load_shard at "), std::string::npos) << advice;
  EXPECT_NE(advice.find(at(script, marked_line(script, "# PLANTED sleep"))), std::string::npos) << advice;
  EXPECT_NE(advice.find("clock_nanosleep"), std::string::npos) << advice;
  for (int rank = 0; rank < 2; ++rank) {
    const json& sampler = rank_entry(r.report, rank).at("sampler");
    EXPECT_EQ(sampler.at("state"), "on") << sampler.dump();
    EXPECT_EQ(sampler.at("hz"), 200) << sampler.dump();
  }
}

// The same without Python (a C program's usleep): no function, file or line to name, only the
// sleeping thread and its system call.
TEST(HostScenarios, ACStragglerIsNamedByItsSystemCall) {
  Scratch s;
  const JobRun r = run_job(s, two_ranks(program("host_straggler_prog")), "TRAINSHIM_SAMPLE_HZ=200");
  ASSERT_EQ(r.exit_code, 0) << r.job_output;
  ASSERT_TRUE(r.report.is_object());
  const json& waits = r.report.at("collective_waits");
  EXPECT_EQ(waits.at("matched"), kSteps);
  ASSERT_FALSE(waits.at("straggler").is_null()) << waits.dump(1);
  EXPECT_EQ(waits.at("straggler").at("rank"), 1);
  const json& doing = waits.at("straggler_doing");
  ASSERT_TRUE(doing.is_object()) << waits.dump(1);
  EXPECT_EQ(doing.at("rank"), 1);
  EXPECT_EQ(doing.at("thread"), "main");
  EXPECT_EQ(doing.at("function"), "");
  EXPECT_EQ(doing.at("file"), "");
  EXPECT_EQ(doing.at("line"), 0);
  EXPECT_EQ(doing.at("state"), "sleeping");
  EXPECT_EQ(doing.at("syscall"), "clock_nanosleep");
  EXPECT_GE(doing.at("share").get<double>(), 0.8) << doing.dump();
  const auto named = findings_of(r.report, "straggler", 1);
  ASSERT_EQ(named.size(), 1u) << r.report.at("findings").dump(1);
  EXPECT_NE(named[0].dump().find("clock_nanosleep"), std::string::npos) << named[0].dump();
}

// (b) Rank 1's dataset sleeps in __getitem__: its main thread waits in DataLoader.__next__ every
// step, as long as the job measured (within 10 %); the site is the user's next() line; an
// input_bound finding for rank 1 only. In the main process (no workers) none of the wait is in
// the workers' queue; with a worker, nearly all of it.
class SlowLoader : public ::testing::TestWithParam<int> {};

TEST_P(SlowLoader, ItsRankWaitsAsLongAsItMeasuredAtItsNextLine) {
  const int workers = GetParam();
  constexpr int kLoaderSteps = 40;
  Scratch s;
  const std::string script = job_script("host_input_wait.py");
  const JobRun r = run_job(s, python_ranks("host_input_wait.py"),
                           "TRAINSHIM_SAMPLE_HZ=200 HOST_STEPS=" + std::to_string(kLoaderSteps) + " HOST_WORKERS=" +
                               std::to_string(workers) + " HOST_LOAD_MS=" + (workers == 0 ? "25" : "30"));
  ASSERT_EQ(r.exit_code, 0) << r.job_output;
  ASSERT_TRUE(r.report.is_object());

  const json& wait = rank_entry(r.report, 1).at("input_wait");
  // One step per all-reduce, from its call to the next one's: the first batch (with the workers'
  // start) is fetched before the first step, each later one inside a step, and the last step has
  // no end. The 39 steps hold the waits for batches 1 to 39.
  const int steps = wait.at("steps");
  ASSERT_EQ(steps, kLoaderSteps - 1) << wait.dump(1);
  std::vector<double> waits = measured_ns(s, 1, "input_wait");
  ASSERT_EQ(waits.size(), std::size_t(kLoaderSteps));
  const double measured = std::accumulate(waits.begin() + 1, waits.begin() + 1 + steps, 0.0) / steps;
  EXPECT_TRUE(within_10_percent(wait.at("ns_per_step").get<double>(), measured)) << wait.dump(1);
  const std::string site = wait.at("site");
  EXPECT_TRUE(site.ends_with("/host_input_wait.py:" + std::to_string(marked_line(script, "# PLANTED next_batch")) +
                             " in train"))
      << site;
  if (workers == 0) {
    EXPECT_EQ(wait.at("queue_share"), 0.0) << wait.dump(1);
  } else {
    EXPECT_GE(wait.at("queue_share").get<double>(), 0.9) << wait.dump(1);
  }
  EXPECT_EQ(findings_of(r.report, "input_bound", 1).size(), 1u) << r.report.at("findings").dump(1);
  EXPECT_TRUE(findings_of(r.report, "input_bound", 0).empty()) << r.report.at("findings").dump(1);
}

INSTANTIATE_TEST_SUITE_P(Workers, SlowLoader, ::testing::Values(0, 1),
                         [](const auto& info) { return info.param == 0 ? "InTheMainProcess" : "WithAWorker"; });

// (c) Every rank blocks in its loader's queue get after 3 steps whose all-reduces all completed:
// a hang outside collectives (no_progress), with each rank's stack down to the blocking frame.
TEST(HostScenarios, ALoaderDeadlockIsAHangWithEveryRanksStack) {
  Scratch s;
  const std::string script = job_script("host_loader_deadlock.py");
  LiveJob job(s, python_ranks("host_loader_deadlock.py"), "TRAINSHIM_HANG_S=3");
  ASSERT_TRUE(job.wait_until_ready(2)) << job.log();
  const json report = wait_for_hangs(s);
  ASSERT_TRUE(report.is_object()) << "no hang reported while the job hung: " << job.log();
  ASSERT_EQ(report.at("hangs").size(), 1u) << report.at("hangs").dump(1);
  const auto hangs = findings_of(report, "hang");
  ASSERT_EQ(hangs.size(), 1u) << report.at("findings").dump(1);
  EXPECT_EQ(hangs[0].at("hang_kind"), "no_progress") << hangs[0].dump(1);
  const std::string stacks = hangs[0].at("stacks");
  const int get_line = marked_line(dataloader_source(), "data = self._data_queue.get(timeout=timeout)");
  const int user_line = marked_line(script, "# PLANTED wait_batch");
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const std::string mine = stack_of(stacks, rank);
    ASSERT_FALSE(mine.empty()) << stacks;
    EXPECT_NE(mine.find("(pid " + std::to_string(job.pid_of(rank)) + ")"), std::string::npos) << mine;
    EXPECT_TRUE(has_frame(mine, "_try_get_data", "dataloader.py", get_line)) << mine;
    EXPECT_TRUE(has_frame(mine, "train", script, user_line)) << mine;
  }
}

// (d) Rank 1 never enters the communicator's first all-reduce: a collective hang at sequence 1,
// rank 1 missing, named with where it is now (its sleeping line) rather than its last CUDA call.
TEST(HostScenarios, AHangOnTheFirstCollectiveNamesTheMissingRanksStack) {
  Scratch s;
  const std::string script = job_script("host_first_collective_hang.py");
  LiveJob job(s, python_ranks("host_first_collective_hang.py"), "TRAINSHIM_HANG_S=3");
  ASSERT_TRUE(job.wait_until_ready(2)) << job.log();
  const json report = wait_for_hangs(s);
  ASSERT_TRUE(report.is_object()) << "no hang reported while the job hung: " << job.log();
  ASSERT_EQ(report.at("hangs").size(), 1u) << report.at("hangs").dump(1);
  const json& hang = report.at("hangs")[0];
  EXPECT_EQ(hang.at("op"), "ncclAllReduce");
  EXPECT_EQ(hang.at("sequence"), 1);
  EXPECT_EQ(hang.at("missing_ranks"), json::array({1}));
  EXPECT_EQ(hang.at("waiting_ranks"), json::array({0}));
  const auto hangs = findings_of(report, "hang", 1);
  ASSERT_EQ(hangs.size(), 1u) << report.at("findings").dump(1);
  EXPECT_EQ(hangs[0].at("hang_kind"), "collective") << hangs[0].dump(1);
  const std::string missing = stack_of(hangs[0].at("stacks"), 1);
  ASSERT_FALSE(missing.empty()) << hangs[0].dump(1);
  EXPECT_NE(missing.find("(pid " + std::to_string(job.pid_of(1)) + ")"), std::string::npos) << missing;
  EXPECT_NE(missing.find(" in clock_nanosleep"), std::string::npos) << missing;
  EXPECT_TRUE(has_frame(missing, "load_checkpoint", script, marked_line(script, "# PLANTED waiting_for_checkpoint")))
      << missing;
}

// (e) `trainshim dump` while rank 0 spins in pure Python holding the GIL and rank 1 sleeps: each
// rank's main thread at its planted line, innermost frame first; exit 0; the job runs on.
TEST(HostScenarios, DumpShowsASpinningRanksLineWhileItHoldsTheGil) {
  Scratch s;
  const std::string script = job_script("host_spin.py");
  const int spin_line = marked_line(script, "# PLANTED spin"), idle_line = marked_line(script, "# PLANTED idle");
  LiveJob job(s, python_ranks("host_spin.py"), "TRAINSHIM_JOB=" + s.job + " ");
  ASSERT_TRUE(job.wait_until_ready(2)) << job.log();
  auto innermost = [](const json& dump, int rank) -> json {
    for (const auto& r : dump.at("ranks")) {
      if (r.at("rank") != rank) continue;
      for (const auto& t : r.at("threads"))
        if (t.at("main") == true && !t.at("frames").empty()) return t;
    }
    return nullptr;
  };
  json dump;
  for (int i = 0; i < 120; ++i) {
    const auto result = run(trainshim_cli() + " dump --json " + s.db());
    if (result.exit_code == 0) {
      dump = json::parse(result.out);
      const json spinning = innermost(dump, 0), idle = innermost(dump, 1);
      if (spinning.is_object() && idle.is_object() && spinning.at("frames")[0].at("line") == spin_line &&
          idle.at("frames")[0].at("line") == idle_line)
        break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  ASSERT_TRUE(dump.is_object()) << "dump never answered: " << job.log();
  const json spinning = innermost(dump, 0), idle = innermost(dump, 1);
  ASSERT_TRUE(spinning.is_object()) << dump.dump(1);
  ASSERT_TRUE(idle.is_object()) << dump.dump(1);
  EXPECT_EQ(spinning.at("frames")[0].at("function"), "spin");
  EXPECT_TRUE(spinning.at("frames")[0].at("file").get<std::string>().ends_with("/host_spin.py"));
  EXPECT_EQ(spinning.at("frames")[0].at("line"), spin_line);
  EXPECT_EQ(spinning.at("frames")[1].at("function"), "main");
  EXPECT_EQ(idle.at("frames")[0].at("function"), "idle");
  EXPECT_EQ(idle.at("frames")[0].at("line"), idle_line);
  EXPECT_EQ(idle.at("syscall"), "clock_nanosleep");
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(find_row(dump.at("ranks"), {{"rank", rank}}).at("pid"), job.pid_of(rank)) << dump.dump(1);

  const auto text = run(trainshim_cli() + " dump " + s.db());
  EXPECT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("at spin (" + script + ":" + std::to_string(spin_line) + ")"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("at idle (" + script + ":" + std::to_string(idle_line) + ")"), std::string::npos) << text.out;
  // Named by its job alone, from another directory: the database given to --out is found.
  const auto by_job = run("cd / && " + trainshim_cli() + " dump --job " + s.job);
  EXPECT_EQ(by_job.exit_code, 0) << by_job.out;
  EXPECT_NE(by_job.out.find("at idle (" + script + ":" + std::to_string(idle_line) + ")"), std::string::npos)
      << by_job.out;
  // Dumping stopped nothing: both ranks are still there, rank 0 still spinning.
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(kill(job.pid_of(rank), 0), 0) << "rank " << rank << " is gone";
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// simcuda's PCI address of `device`, as the sysfs directory names it (lower-case hex).
std::string sysfs_bus_id(const Scratch& s, int device) {
  const auto result =
      run(job_environment(s) + " python3 -c 'import sim; print(sim.pci_bus_id(" + std::to_string(device) + "))'");
  std::string id = result.out.substr(0, result.out.find('\n'));
  for (char& c : id) c = char(std::tolower(static_cast<unsigned char>(c)));
  return id;
}

// A sysfs tree as the shim reads it (TRAINSHIM_SYSFS): `device`'s GPU on NUMA node `node`, whose
// CPUs are `node_cpus`; the node's online CPUs as they are.
std::string sysfs_tree(const Scratch& s, const std::string& name, int device, int node, const std::string& node_cpus) {
  const std::filesystem::path root = std::filesystem::path(s.dir) / name;
  write_file(root / "bus/pci/devices" / sysfs_bus_id(s, device) / "numa_node", std::to_string(node));
  write_file(root / "devices/system/node" / ("node" + std::to_string(node)) / "cpulist", node_cpus);
  write_file(root / "devices/system/cpu/online", cpulist(allowed_cpus()));
  return root.string();
}

// host_setup.py with each rank's own sysfs tree, rank 1 under `rank1_prefix` (taskset, say).
std::string setup_job(const std::string& tree0, const std::string& tree1, const std::string& rank1_prefix = "") {
  const std::string python = "python3 " + job_script("host_setup.py");
  return two_ranks("sh -c 'if [ \"$RANK\" = 1 ]; then exec env TRAINSHIM_SYSFS=" + tree1 + " " + rank1_prefix + " " +
                   python + "; else exec env TRAINSHIM_SYSFS=" + tree0 + " " + python + "; fi'");
}

// Both ranks' trees right: each rank's GPU on a node whose CPUs are all the rank may use.
std::pair<std::string, std::string> right_trees(const Scratch& s) {
  const std::string all = cpulist(allowed_cpus());
  return {sysfs_tree(s, "sysfs0", 0, 0, all), sysfs_tree(s, "sysfs1", 1, 0, all)};
}

const std::string kSetupEnvironment = "OMP_NUM_THREADS=1 ";

// (f) Rank 1 is pinned to one CPU while its GPU sits on node 1, whose CPUs are others: its
// numa_affinity item is off, with a finding; rank 0's tree is right.
TEST(HostScenarios, ARankOnTheWrongNumaNodeIsFound) {
  Scratch s;
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  const int pinned = cpus.front();
  const std::string tree0 = sysfs_tree(s, "sysfs0", 0, 0, cpulist(cpus));
  const std::string tree1 = sysfs_tree(s, "sysfs1", 1, 1, std::to_string(pinned + 1));
  const JobRun r = run_job(s, setup_job(tree0, tree1, "taskset -c " + std::to_string(pinned)), kSetupEnvironment);
  ASSERT_EQ(r.exit_code, 0) << r.job_output;
  ASSERT_TRUE(r.report.is_object());
  const json wrong = setup_item(r.report, 1, "numa_affinity");
  ASSERT_TRUE(wrong.is_object()) << r.report.at("setup").dump(1);
  EXPECT_EQ(wrong.at("ok"), false) << wrong.dump();
  const json right = setup_item(r.report, 0, "numa_affinity");
  ASSERT_TRUE(right.is_object()) << r.report.at("setup").dump(1);
  EXPECT_EQ(right.at("ok"), true) << right.dump();
  EXPECT_EQ(findings_of(r.report, "setup_numa_affinity", 1).size(), 1u) << r.report.at("findings").dump(1);
  EXPECT_TRUE(findings_of(r.report, "setup_numa_affinity", 0).empty()) << r.report.at("findings").dump(1);
}

// (g) NCCL_P2P_DISABLE=1 turns off NCCL's fast path between GPUs: each rank's nccl_env item is off
// and names it.
TEST(HostScenarios, NcclP2pDisableIsFound) {
  Scratch s;
  const auto [tree0, tree1] = right_trees(s);
  const JobRun r = run_job(s, setup_job(tree0, tree1), kSetupEnvironment + "NCCL_P2P_DISABLE=1");
  ASSERT_EQ(r.exit_code, 0) << r.job_output;
  ASSERT_TRUE(r.report.is_object());
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const json item = setup_item(r.report, rank, "nccl_env");
    ASSERT_TRUE(item.is_object()) << r.report.at("setup").dump(1);
    EXPECT_EQ(item.at("ok"), false) << item.dump();
    EXPECT_NE(item.at("observed").dump().find("NCCL_P2P_DISABLE"), std::string::npos) << item.dump();
    EXPECT_EQ(setup_item(r.report, rank, "numa_affinity").at("ok"), true);
  }
  const auto found = findings_of(r.report, "setup_nccl_env");
  ASSERT_FALSE(found.empty()) << r.report.at("findings").dump(1);
  EXPECT_NE(found[0].dump().find("NCCL_P2P_DISABLE"), std::string::npos) << found[0].dump();
}

// (h) The control: balanced ranks, a fast pinned loader with a persistent worker,
// OMP_NUM_THREADS set, both NUMA trees right. No input wait worth a finding, no hang, every setup
// item ok, no straggler that costs a planted one's share of a step; the sampler on with samples
// kept on both ranks.
TEST(HostScenarios, AWellSetUpJobHasNoHostFinding) {
  Scratch s;
  const auto [tree0, tree1] = right_trees(s);
  const JobRun r = run_job(s, setup_job(tree0, tree1), kSetupEnvironment + "TRAINSHIM_SAMPLE_HZ=200");
  ASSERT_EQ(r.exit_code, 0) << r.job_output;
  ASSERT_TRUE(r.report.is_object());
  EXPECT_TRUE(r.report.at("hangs").empty()) << r.report.at("hangs").dump(1);
  EXPECT_TRUE(findings_of(r.report, "hang").empty());
  EXPECT_TRUE(findings_of(r.report, "input_bound").empty()) << r.report.at("findings").dump(1);
  EXPECT_EQ(setup_finding_kinds(r.report), std::vector<std::string>{}) << r.report.at("setup").dump(1);
  std::set<std::string> items;
  for (const auto& item : r.report.at("setup")) {
    EXPECT_EQ(item.at("ok"), true) << item.dump();
    items.insert(item.at("item"));
  }
  EXPECT_EQ(items, (std::set<std::string>{"dataloader_workers", "pinned_memory", "numa_affinity", "omp_threads",
                                          "nccl_env", "ranks_per_node", "mixed_precision"}));
  for (int rank = 0; rank < 2; ++rank) {
    const json& sampler = rank_entry(r.report, rank).at("sampler");
    EXPECT_EQ(sampler.at("state"), "on") << sampler.dump();
    EXPECT_GT(sampler.at("samples").get<int>(), 0) << sampler.dump();
  }
  // No rank was planted late, but two ranks, their workers, the collector and the samplers share 2
  // cores here: under load one rank can come a millisecond late on average, over the straggler
  // rule's 1 ms. What a planted straggler costs is its step's host work (40 ms in (a)); a straggler
  // found here must cost less than a twentieth of the rank's own measured step.
  const json& straggler = r.report.at("collective_waits").at("straggler");
  if (!straggler.is_null()) {
    const double step_ns = rank_entry(r.report, straggler.at("rank").get<int>()).at("steps").at("step_ns");
    EXPECT_LT(straggler.at("imposed_per_step_ns").get<double>(), step_ns / 20)
        << r.report.at("collective_waits").dump(1);
  }
}

}  // namespace
}  // namespace trainshim::test
