// The shim's sampler (shim/core/sampler.cpp) on simcuda: what a process's segment holds once it
// exited (no collector runs: the segment is read as the collector reads it).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "harness.hpp"
#include "segment_reader.hpp"
#include "trainshim/names.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::test {
namespace {

struct Frame {
  std::string file, function;
  int line;
};

struct Segment {
  bool found = false;
  uint32_t pid = 0;
  SamplerState sampler = SamplerState::NotStarted;
  uint32_t sample_hz = 0;
  uint64_t torn = 0;
  std::vector<EventRecord> records;
  std::map<uint32_t, std::string> strings;
  std::map<uint32_t, std::vector<Frame>> stacks;  // by id, innermost first
  std::map<std::string, std::string> facts;       // later lines replace earlier ones; thread names apart
  std::map<uint32_t, std::string> thread_names;   // the thread.<TID> facts, later lines replacing earlier
  int fact_records = 0;

  std::vector<EventRecord> of(ApiClass c) const {
    std::vector<EventRecord> found;
    for (const EventRecord& r : records)
      if (api_class_of(r) == c) found.push_back(r);
    std::sort(found.begin(), found.end(),
              [](const EventRecord& a, const EventRecord& b) { return a.begin_ticks < b.begin_ticks; });
    return found;
  }
  std::vector<EventRecord> samples_of(uint32_t tid) const {
    std::vector<EventRecord> found;
    for (const EventRecord& r : of(ApiClass::Sample))
      if (r.tid == tid) found.push_back(r);
    return found;
  }
};

// The segment `name` of an exited process, as the collector reads it.
Segment read_segment(const std::string& name) {
  Segment segment;
  segment.found = true;
  collector::SegmentReader reader(name);
  segment.pid = reader.header().pid;
  // The reader's copy of the header leaves the sampler's fields out: they are read in place.
  const int fd = open((std::string(kShmDir) + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  void* mapped = mmap(nullptr, sizeof(SegmentHeader), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  EXPECT_NE(mapped, MAP_FAILED);
  if (mapped != MAP_FAILED) {
    const auto* header = static_cast<const SegmentHeader*>(mapped);
    segment.sampler = SamplerState(header->sampler.load());
    segment.sample_hz = header->sample_hz.load();
    segment.torn = header->samples_torn.load();
    munmap(mapped, sizeof(SegmentHeader));
  }
  reader.drain([&](const EventRecord& r) { segment.records.push_back(r); }, true);
  std::vector<SideRecord> python;
  reader.drain_side(
      [&](const SideRecord& r) {
        if (r.kind == uint16_t(SideKind::String)) segment.strings[r.id] = std::string(r.text, r.count);
        if (r.kind == uint16_t(SideKind::PythonStack)) python.push_back(r);
        if (r.kind == uint16_t(SideKind::Facts)) {
          ++segment.fact_records;
          std::istringstream lines(std::string(r.text, r.count));
          for (std::string line; std::getline(lines, line);) {
            const auto equals = line.find('=');
            if (equals == std::string::npos) continue;
            const std::string key = line.substr(0, equals), value = line.substr(equals + 1);
            if (key.starts_with(kFactThreadPrefix))
              segment.thread_names[uint32_t(std::stoul(key.substr(kFactThreadPrefix.size())))] = value;
            else segment.facts[key] = value;
          }
        }
      },
      true);
  for (const SideRecord& r : python) {
    std::vector<Frame>& frames = segment.stacks[r.id];
    for (int i = 0; i < r.count; ++i)
      frames.push_back({segment.strings[r.python[i].file], segment.strings[r.python[i].function], r.python[i].line});
  }
  reader.unlink();
  return segment;
}

// Runs `command` (a full command line: environment and program) with no collector and reads the
// segments of the job's processes.
std::vector<Segment> run_and_read_all(const Scratch& s, const std::string& command, Outcome* outcome = nullptr) {
  const Outcome result = run(command);
  EXPECT_EQ(result.exit_code, 0) << command << "\n" << result.out;
  if (outcome) *outcome = result;
  std::vector<Segment> segments;
  for (const std::string& name : collector::list_segments(getuid(), s.job)) segments.push_back(read_segment(name));
  return segments;
}

// As run_and_read_all, for a job of one process (found false when it made no segment).
Segment run_and_read(const Scratch& s, const std::string& command, Outcome* outcome = nullptr) {
  std::vector<Segment> segments = run_and_read_all(s, command, outcome);
  EXPECT_LE(segments.size(), 1u);
  return segments.size() == 1 ? segments[0] : Segment{};
}

std::string shim_env(const Scratch& s, const std::string& hz) {
  return preload_env(s.job) + " TRAINSHIM_SPAWN_COLLECTOR=0 TRAINSHIM_SAMPLE_HZ=" + hz + " ";
}

// The value after `key ` on the output's line that starts with it.
std::string printed(const std::string& out, const std::string& key) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with(key + " ")) return line.substr(key.size() + 1);
  ADD_FAILURE() << "no '" << key << "' in " << out;
  return {};
}

// The tids a sampler_prog printed after `key `.
std::set<uint32_t> printed_tids(const std::string& out, const std::string& key) {
  std::set<uint32_t> tids;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (line.starts_with(key + " ")) tids.insert(uint32_t(std::stoul(line.substr(key.size() + 1))));
  return tids;
}

// The ticks of a thread's samples, in order.
std::vector<uint32_t> ticks_of(const Segment& segment, uint32_t tid) {
  std::vector<uint32_t> ticks;
  for (const EventRecord& r : segment.samples_of(tid)) ticks.push_back(sample_tick(r));
  return ticks;
}

// Ticks first to last, each once.
bool every_tick(const std::vector<uint32_t>& ticks) {
  for (std::size_t i = 1; i < ticks.size(); ++i)
    if (ticks[i] != ticks[i - 1] + 1) return false;
  return !ticks.empty();
}

// The frames of `stack` from the first one in `file` outwards.
std::vector<Frame> from_file(const std::vector<Frame>& stack, const std::string& file) {
  auto first = std::find_if(stack.begin(), stack.end(), [&](const Frame& f) { return f.file.ends_with(file); });
  return {first, stack.end()};
}

TEST(Sampler, CThreadSleepingInClockNanosleepIsSleepingInThatCall) {
  Scratch s;
  const Segment segment = run_and_read(s, shim_env(s, "100") + program("sampler_prog") + " sleep 400");
  ASSERT_TRUE(segment.found);
  EXPECT_EQ(segment.sampler, SamplerState::On);
  EXPECT_EQ(segment.sample_hz, 100u);
  EXPECT_EQ(segment.torn, 0u);
  const auto samples = segment.of(ApiClass::Sample);
  ASSERT_GE(samples.size(), 2u);
  uint32_t tick = 0;
  for (const EventRecord& r : samples) {
    // Only the main thread made calls; no Python: no stacks.
    EXPECT_EQ(r.tid, segment.pid);
    // The last tick may have come as the thread woke up to exit.
    if (&r != &samples.back()) {
      EXPECT_EQ(sample_state(r), 'S');
      EXPECT_EQ(sample_syscall(r), SYS_clock_nanosleep);
    }
    EXPECT_EQ(r.python_stack, 0u);
    EXPECT_EQ(r.native_stack, 0u);
    EXPECT_EQ(sample_tick(r), ++tick) << "one sample per tick, ticks from 1";
  }
  EXPECT_FALSE(segment.of(ApiClass::ProcessSample).empty());
  EXPECT_EQ(segment.facts.at("device"), "0");
}

TEST(Sampler, AProcessWithoutCudaCallsHasNoSamplerThread) {
  Scratch s;
  Outcome outcome;
  const Segment segment = run_and_read(s, shim_env(s, "1000") + program("sampler_prog") + " no_cuda 100", &outcome);
  EXPECT_FALSE(segment.found);
  EXPECT_EQ(printed(outcome.out, "threads"), "1");
}

TEST(Sampler, RateZeroTurnsItOff) {
  Scratch s;
  const Segment segment = run_and_read(s, shim_env(s, "0") + program("sampler_prog") + " sleep 200");
  ASSERT_TRUE(segment.found);
  EXPECT_EQ(segment.sampler, SamplerState::Off);
  EXPECT_EQ(segment.sample_hz, 0u);
  EXPECT_TRUE(segment.of(ApiClass::Sample).empty());
  EXPECT_TRUE(segment.of(ApiClass::ProcessSample).empty());
  EXPECT_EQ(segment.fact_records, 0);
}

TEST(Sampler, ABadRateIsSaidAndTheDefaultUsed) {
  Scratch s;
  Outcome outcome;
  const Segment segment = run_and_read(s, shim_env(s, "2000") + program("sampler_prog") + " sleep 100 2>&1", &outcome);
  ASSERT_TRUE(segment.found);
  EXPECT_EQ(segment.sampler, SamplerState::On);
  EXPECT_EQ(segment.sample_hz, 50u);
  EXPECT_NE(outcome.out.find("trainshim: TRAINSHIM_SAMPLE_HZ=\"2000\" is not a whole number from 0 to 1000: using the "
                             "default 50"),
            std::string::npos)
      << outcome.out;
}

TEST(Sampler, FactsComeFromTheRuntimeSysfsAndTheEnvironment) {
  Scratch s;
  const std::string sysfs = s.dir + "/sys";
  const auto write = [&](const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(sysfs + path).parent_path());
    std::ofstream(sysfs + path) << text;
  };
  write("/devices/system/cpu/online", "0-63\n");
  // Device 1 of simcuda is on bus 0x4c (0x3B + 0x11 per device).
  write("/bus/pci/devices/0000:4c:00.0/numa_node", "1\n");
  write("/devices/system/node/node1/cpulist", "32-63\n");
  write("/devices/system/node/node0/cpulist", "0-31\n");
  // A clean environment: the facts name exactly these variables.
  const Segment segment =
      run_and_read(s, "env -i LD_LIBRARY_PATH=" + std::string(Paths::simcuda) + " " + shim_env(s, "100") +
                          "TRAINSHIM_SYSFS=" + sysfs +
                          " SIMCUDA_DEVICES=2 OMP_NUM_THREADS=4 NCCL_P2P_DISABLE=1 NCCL_DEBUG=INFO PATH=/usr/bin " +
                          program("sampler_prog") + " facts 200");
  ASSERT_TRUE(segment.found);
  const std::map<std::string, std::string> expected = {
      {"affinity", "0"},
      {"cpus_online", "0-63"},
      {"device", "1"},
      {"gpus", "2"},
      {"gpu_pci_bus_id", "0000:4c:00.0"},
      {"gpu_numa_node", "1"},
      {"gpu_numa_cpus", "32-63"},
      {"env.NCCL_DEBUG", "INFO"},
      {"env.NCCL_P2P_DISABLE", "1"},
      {"env.OMP_NUM_THREADS", "4"},
  };
  EXPECT_EQ(segment.facts, expected);
}

// Review round 2, §10: a FIFO where a fact is read stopped the sampler for the whole run (no
// sample, no fact). The fact is left out; the rest is read, and the sampler samples.
TEST(Sampler, AFactThatWouldBlockIsLeftOutAndSamplingGoesOn) {
  Scratch s;
  const std::string sysfs = s.dir + "/sys";
  std::filesystem::create_directories(sysfs + "/devices/system/cpu");
  std::filesystem::create_directories(sysfs + "/devices/system/node/node1");
  std::filesystem::create_directories(sysfs + "/bus/pci/devices/0000:4c:00.0");
  ASSERT_EQ(mkfifo((sysfs + "/devices/system/cpu/online").c_str(), 0600), 0);
  ASSERT_EQ(mkfifo((sysfs + "/devices/system/node/node1/cpulist").c_str(), 0600), 0);
  std::ofstream(sysfs + "/bus/pci/devices/0000:4c:00.0/numa_node") << "1\n";
  const Segment segment = run_and_read(
      s, "env -i LD_LIBRARY_PATH=" + std::string(Paths::simcuda) + " " + shim_env(s, "100") +
             "TRAINSHIM_SYSFS=" + sysfs + " SIMCUDA_DEVICES=2 PATH=/usr/bin " + program("sampler_prog") + " facts 200");
  ASSERT_TRUE(segment.found);
  const std::map<std::string, std::string> expected = {
      {"affinity", "0"}, {"device", "1"}, {"gpus", "2"}, {"gpu_pci_bus_id", "0000:4c:00.0"}, {"gpu_numa_node", "1"},
  };
  EXPECT_EQ(segment.facts, expected);
  EXPECT_FALSE(segment.samples_of(segment.pid).empty());
}

TEST(Sampler, ChildProcessCensusCountsDataLoaderWorkers) {
  Scratch s;
  Outcome outcome;
  const Segment segment = run_and_read(s, shim_env(s, "100") + program("sampler_prog") + " census 1200", &outcome);
  ASSERT_TRUE(segment.found);
  const auto census = segment.of(ApiClass::ProcessSample);
  ASSERT_GE(census.size(), 1u);
  for (const EventRecord& r : census) {
    const ProcessCensus c = process_census(r);
    EXPECT_EQ(c.workers_alive, 2u);
    EXPECT_EQ(c.workers_seen, 2u);
    EXPECT_EQ(c.other_children, 1u);
    // The workers burnt their CPU before the first call and sleep since.
    EXPECT_EQ(std::to_string(c.workers_cpu_ns), printed(outcome.out, "workers_cpu_ns"));
    EXPECT_EQ(std::to_string(c.threads), printed(outcome.out, "threads"));
  }
}

// Workers that live for less than the census period are still counted: a fork schedules a
// census 100 ms later.
TEST(Sampler, WorkersForkedBetweenCensusesAreCounted) {
  Scratch s;
  const Segment segment = run_and_read(s, shim_env(s, "100") + program("sampler_prog") + " short_workers 200");
  ASSERT_TRUE(segment.found);
  uint64_t most_alive = 0, seen = 0;
  for (const EventRecord& r : segment.of(ApiClass::ProcessSample)) {
    const ProcessCensus c = process_census(r);
    most_alive = std::max(most_alive, c.workers_alive);
    seen = std::max(seen, c.workers_seen);
  }
  EXPECT_EQ(most_alive, 2u);
  EXPECT_EQ(seen, 2u);
}

TEST(Sampler, AForkedChildSamplesItsOwnThreadsOnly) {
  Scratch s;
  Outcome outcome;
  const auto segments =
      run_and_read_all(s, "SIMCUDA_DEVICES=2 " + shim_env(s, "100") + program("sampler_prog") + " fork 300", &outcome);
  ASSERT_EQ(segments.size(), 2u);
  const uint32_t child = uint32_t(std::stoul(printed(outcome.out, "child")));
  for (const Segment& segment : segments) {
    SCOPED_TRACE(segment.pid);
    EXPECT_EQ(segment.sampler, SamplerState::On);
    const auto samples = segment.of(ApiClass::Sample);
    ASSERT_FALSE(samples.empty());
    // Each process samples its own main thread only, from tick 1.
    for (const EventRecord& r : samples) EXPECT_EQ(r.tid, segment.pid);
    EXPECT_EQ(sample_tick(samples.front()), 1u);
    EXPECT_EQ(segment.facts.at("device"), segment.pid == child ? "0" : "1");
  }
  EXPECT_TRUE(segments[0].pid == child || segments[1].pid == child);
}

// A program that forbids, with a seccomp filter that kills, the call it never makes itself
// (process_vm_readv) is sampled through its memory file and lives (review round 2, §4: "Bad system
// call", exit status 159).
TEST(Sampler, ASandboxThatKillsAtProcessVmReadvNeitherKillsTheJobNorHidesItsStacks) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/seccomp_sandbox.py";
  Outcome outcome;
  // Every thread read at every tick: the worker runs throughout.
  const Segment segment = run_and_read(
      s, "TRAINSHIM_SAMPLE_BUDGET_US=1000000 " + shim_env(s, "200") + "python3 " + script + " 1", &outcome);
  ASSERT_TRUE(segment.found);
  EXPECT_NE(outcome.out.find("finished\n"), std::string::npos) << outcome.out;
  const uint32_t worker = uint32_t(std::stoul(printed(outcome.out, "worker")));
  const int line = marked_line(script, "# SAMPLED deep");
  int samples = 0, in_deep = 0;
  for (const EventRecord& r : segment.samples_of(worker)) {
    ++samples;
    if (!r.python_stack) continue;
    const std::vector<Frame>& stack = segment.stacks.at(r.python_stack);
    const std::vector<Frame> user = from_file(stack, "seccomp_sandbox.py");
    if (user.empty()) {
      // Sampled after deep returned, before the thread ended: threading's frames alone.
      for (const Frame& f : stack) EXPECT_TRUE(f.file.ends_with("threading.py")) << f.file << ":" << f.function;
      continue;
    }
    // deep 21 times, then threading's frames: the thread's whole stack.
    ASSERT_GE(user.size(), 21u);
    EXPECT_EQ(user[0].function, "deep");
    // The loop's lines: its condition, the copy, the sleep.
    EXPECT_TRUE(user[0].line >= line - 1 && user[0].line <= line + 1) << user[0].line;
    EXPECT_EQ(user[20].function, "deep");
    ++in_deep;
  }
  // 200 a second for a second; a sample whose frames changed while read is left out.
  EXPECT_GT(samples, 100);
  EXPECT_GT(in_deep, samples / 2);
}

// A main thread that pthread_exit()s leaves a zombie (round 2's zombiemain): its workers are
// sampled, and the process ends when one of them exit()s.
TEST(Sampler, WorkersOfAMainThreadThatExitedAreSampledAndTheProcessEndsWithThem) {
  Scratch s;
  Outcome outcome;
  // A process held up at its exit would be ended by timeout, with status 124.
  const Segment segment =
      run_and_read(s, shim_env(s, "1000") + "timeout 60 " + program("sampler_prog") + " main_exits 300", &outcome);
  ASSERT_TRUE(segment.found);
  EXPECT_EQ(segment.sampler, SamplerState::On);
  EXPECT_EQ(segment.of(ApiClass::Sync).size(), 5u) << "the main thread's call and each worker's";
  const std::set<uint32_t> workers = printed_tids(outcome.out, "worker");
  ASSERT_EQ(workers.size(), 4u) << outcome.out;
  for (const uint32_t worker : workers) {
    SCOPED_TRACE(worker);
    int asleep = 0;
    for (const EventRecord& r : segment.samples_of(worker))
      if (sample_state(r) == 'S' && sample_syscall(r) == SYS_clock_nanosleep) ++asleep;
    EXPECT_GT(asleep, 0) << "sampled while the main thread was gone";
  }
}

// sampler_prog rotation MS at 100 Hz under TRAINSHIM_SAMPLE_BUDGET_US `budget_us`: its segment and
// the threads it printed.
struct Rotation {
  Segment segment;
  std::set<uint32_t> polling, blocked;
  std::string out;
  // Its segment was read, and its 8 polling and 4 blocked threads started.
  bool started() const { return segment.found && polling.size() == 8 && blocked.size() == 4; }
};

Rotation run_rotation(const Scratch& s, const std::string& budget_us, const std::string& ms) {
  Rotation r;
  Outcome outcome;
  r.segment = run_and_read(s,
                           "TRAINSHIM_SAMPLE_BUDGET_US=" + budget_us + " " + shim_env(s, "100") +
                               program("sampler_prog") + " rotation " + ms,
                           &outcome);
  r.polling = printed_tids(outcome.out, "polling");
  r.blocked = printed_tids(outcome.out, "blocked");
  r.out = outcome.out;
  return r;
}

// The main thread is sampled every tick; the other threads take turns within
// TRAINSHIM_SAMPLE_BUDGET_US, a thread asleep since its last sample for a clock read, one that ran
// read in full: each is sampled, none at every tick, none far more often than another. 2,000 us a
// second is 20 us a tick at 100 Hz, less than the 8 polling threads' reads cost on any machine
// (each opens and reads 2 /proc files: 50-100 us on this VM), and 3 s of it are enough for a few
// rounds under a sanitizer.
TEST(Sampler, OtherThreadsTakeTurnsWithinTheBudgetAndTheMainThreadIsSampledEveryTick) {
  Scratch s;
  const Rotation rotation = run_rotation(s, "2000", "3000");
  ASSERT_TRUE(rotation.started()) << rotation.out;
  const Segment& segment = rotation.segment;
  const std::vector<uint32_t> main_ticks = ticks_of(segment, segment.pid);
  ASSERT_TRUE(every_tick(main_ticks));
  EXPECT_EQ(main_ticks.front(), 1u);
  std::size_t fewest = SIZE_MAX, most = 0;
  for (const std::set<uint32_t>* threads : {&rotation.polling, &rotation.blocked}) {
    for (const uint32_t tid : *threads) {
      const std::size_t count = ticks_of(segment, tid).size();
      fewest = std::min(fewest, count);
      most = std::max(most, count);
    }
  }
  EXPECT_GE(fewest, 1u);
  EXPECT_LT(most, main_ticks.size());
  EXPECT_LE(most, 2 * fewest + 2) << "in turn: " << fewest << " to " << most << " of " << main_ticks.size();
  for (const uint32_t tid : rotation.blocked) {
    for (const EventRecord& r : segment.samples_of(tid)) {
      EXPECT_EQ(sample_state(r), 'S');
      EXPECT_EQ(sample_syscall(r), SYS_clock_nanosleep);
    }
  }
}

// The census names each thread as it named itself, a later name replacing an earlier one: the
// trace names its tracks so. The main thread renames itself once its threads started; a census
// comes every second, so 2.5 s see both names.
TEST(Sampler, TheCensusNamesEachThreadAsItNamedItself) {
  Scratch s;
  const Rotation rotation = run_rotation(s, "2000", "2500");
  ASSERT_TRUE(rotation.started()) << rotation.out;
  const std::map<uint32_t, std::string>& names = rotation.segment.thread_names;
  EXPECT_EQ(names.at(rotation.segment.pid), "rotation_main");
  for (const uint32_t tid : rotation.polling) EXPECT_EQ(names.at(tid), "poller");
  for (const uint32_t tid : rotation.blocked) EXPECT_EQ(names.at(tid), "sleeper");
}

// With a budget no tick exhausts, every thread is read at every tick.
TEST(Sampler, ABudgetLargeEnoughReadsEveryThreadAtEveryTick) {
  Scratch s;
  const Rotation rotation = run_rotation(s, "1000000", "1000");
  ASSERT_TRUE(rotation.started()) << rotation.out;
  const Segment& segment = rotation.segment;
  std::set<uint32_t> threads = rotation.polling;
  threads.insert(rotation.blocked.begin(), rotation.blocked.end());
  const uint32_t last = ticks_of(segment, segment.pid).back();
  for (const uint32_t tid : threads) {
    SCOPED_TRACE(tid);
    const std::vector<uint32_t> ticks = ticks_of(segment, tid);
    EXPECT_TRUE(every_tick(ticks));
    // The program exit()s while the sampler may be inside a tick: that tick's main-thread sample
    // can be written and the other threads' not.
    EXPECT_GE(ticks.back() + 1, last);
  }
}

class SamplerPython : public ::testing::TestWithParam<std::string> {};

TEST_P(SamplerPython, EachThreadIsSampledWithItsOwnStack) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/sampler_stacks.py";
  Outcome outcome;
  const Segment segment = run_and_read(s, shim_env(s, "200") + GetParam() + " " + script + " 0.5", &outcome);
  ASSERT_TRUE(segment.found);
  EXPECT_EQ(segment.sampler, SamplerState::On);
  const uint32_t worker = uint32_t(std::stoul(printed(outcome.out, "worker")));
  const int main_line = marked_line(script, "# SAMPLED main");
  const int worker_line = marked_line(script, "# SAMPLED worker");

  int main_in_main_waits = 0, worker_in_worker_waits = 0;
  uint32_t last_main_wait_tick = 0;
  for (const EventRecord& r : segment.samples_of(segment.pid)) {
    if (!r.python_stack) continue;
    const std::vector<Frame> user = from_file(segment.stacks.at(r.python_stack), "sampler_stacks.py");
    for (const Frame& f : user) EXPECT_NE(f.function, "worker_waits") << "the worker's frames on the main thread";
    if (!user.empty() && user[0].function == "main_waits") {
      ++main_in_main_waits;
      last_main_wait_tick = sample_tick(r);
      EXPECT_EQ(user[0].line, main_line);
      ASSERT_EQ(user.size(), 3u);
      EXPECT_EQ(user[1].function, "main");
      EXPECT_EQ(user[2].function, "<module>");
    }
  }
  std::vector<EventRecord> waiting;
  for (const EventRecord& r : segment.samples_of(worker)) {
    if (!r.python_stack) continue;
    const std::vector<Frame> user = from_file(segment.stacks.at(r.python_stack), "sampler_stacks.py");
    ASSERT_FALSE(user.empty());
    for (const Frame& f : user) EXPECT_NE(f.function, "main_waits") << "the main thread's frames on the worker";
    if (user[0].function == "worker_waits" && user[0].line == worker_line) {
      waiting.push_back(r);
      ++worker_in_worker_waits;
      // Called by threading's Thread.run, not by the script.
      ASSERT_GE(user.size(), 2u);
      EXPECT_EQ(user[1].function, "run");
      EXPECT_TRUE(user[1].file.ends_with("threading.py")) << user[1].file;
    }
  }
  // After its first sample there (entering the wait) and while the main thread still sleeps in
  // main_waits (the event not yet set), the worker is blocked in the event's futex: asleep there in
  // each sample, whether read again or known from a sample it did not run since.
  int blocked = 0;
  for (std::size_t i = 1; i < waiting.size() && sample_tick(waiting[i]) < last_main_wait_tick; ++i, ++blocked) {
    SCOPED_TRACE(i);
    EXPECT_EQ(sample_state(waiting[i]), 'S');
    EXPECT_EQ(sample_syscall(waiting[i]), SYS_futex);
  }
  EXPECT_GT(blocked, 0);
  EXPECT_GT(main_in_main_waits, 0);
  EXPECT_GT(worker_in_worker_waits, 0);
  for (const EventRecord& r : segment.of(ApiClass::Sample))
    EXPECT_TRUE(r.tid == segment.pid || r.tid == worker) << r.tid << ": only the threads that made calls";
}

TEST_P(SamplerPython, FramesChangingWhileReadAreDroppedAndCounted) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/sampler_torn.py";
  Outcome outcome;
  // It recurses until a torn sample is counted (at most a minute): the sampler and it must run at once.
  const Segment segment = run_and_read(
      s,
      shim_env(s, "1000") + GetParam() + " " + script + " 1 " + std::to_string(offsetof(SegmentHeader, samples_torn)),
      &outcome);
  ASSERT_TRUE(segment.found);
  EXPECT_EQ(outcome.out, "ok\n");
  EXPECT_GT(segment.torn, 0u);
  // What was kept is a real stack of the script: its functions at its lines.
  std::ifstream source(script);
  const auto lines = std::count(std::istreambuf_iterator<char>(source), std::istreambuf_iterator<char>(), '\n');
  const std::set<std::string> functions = {"recurse", "main", "torn", "<module>"};
  for (const EventRecord& r : segment.samples_of(segment.pid)) {
    if (!r.python_stack) continue;
    const std::vector<Frame>& stack = segment.stacks.at(r.python_stack);
    const std::vector<Frame> user = from_file(stack, "sampler_torn.py");
    if (user.empty()) {
      // After the script's frames are gone, Python's exit handlers still run under the sampler (a
      // site-packages module's atexit callback, certifi's on these machines): a real stack of
      // files that exist, never one made of torn reads.
      for (const Frame& f : stack) EXPECT_TRUE(std::filesystem::is_regular_file(f.file)) << f.file << ":" << f.function;
      continue;
    }
    EXPECT_EQ(user.back().function, "<module>");
    for (const Frame& f : user) {
      if (!f.file.ends_with("sampler_torn.py")) continue;
      EXPECT_TRUE(functions.count(f.function)) << f.function;
      EXPECT_GE(f.line, 1);
      EXPECT_LE(f.line, lines);
    }
  }
}

// PyTorch before 2.0 named no worker: a forked child in the DataLoader's worker loop is a worker
// whatever its name, a forked child elsewhere is not.
TEST_P(SamplerPython, UnnamedWorkersAreCountedByTheLoopTheyRun) {
  Scratch s;
  Outcome outcome;
  const Segment segment = run_and_read(s,
                                       shim_env(s, "100") + "PYTHONPATH=" + Paths::torchlike_site + " " + GetParam() +
                                           " " + Paths::source + "/tests/python/sampler_unnamed_workers.py",
                                       &outcome);
  ASSERT_TRUE(segment.found);
  EXPECT_EQ(outcome.out, "done\n");
  uint64_t most_alive = 0, seen = 0;
  for (const EventRecord& r : segment.of(ApiClass::ProcessSample)) {
    const ProcessCensus c = process_census(r);
    most_alive = std::max(most_alive, c.workers_alive);
    seen = std::max(seen, c.workers_seen);
    if (c.workers_alive == 2) {
      EXPECT_EQ(c.other_children, 1u) << "the forked child that is no worker";
    }
  }
  EXPECT_EQ(most_alive, 2u);
  EXPECT_EQ(seen, 2u);
}

// Calls from subinterpreters that are created and destroyed while the sampler reads the main
// thread (round 2's pysubinterp): every call is recorded. Their frames are the subinterpreter's own
// where CPython binds the thread to the interpreter it runs (3.12 on); 3.10 and 3.11 bind it to the
// main interpreter alone, whose frames end at the call that runs the subinterpreter's code.
TEST_P(SamplerPython, CallsFromSubinterpretersAreRecordedWithTheFramesOfTheirThread) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/subinterpreters.py";
  const Outcome outcome = run(shim_env(s, "200") + GetParam() + " " + script + " 2>&1");
  if (GetParam().ends_with("python3.12")) {
    // 3.12's subinterpreters refuse ctypes (its own message), and the job goes on to its end.
    EXPECT_EQ(outcome.exit_code, 3) << outcome.out;
    EXPECT_NE(outcome.out.find("does not support loading in subinterpreters"), std::string::npos) << outcome.out;
    EXPECT_TRUE(collector::list_segments(getuid(), s.job).empty()) << "no CUDA call was made";
    return;
  }
  ASSERT_EQ(outcome.exit_code, 0) << outcome.out;
  EXPECT_EQ(printed(outcome.out, "rounds"), "5");
  const auto segments = collector::list_segments(getuid(), s.job);
  ASSERT_EQ(segments.size(), 1u) << outcome.out;
  const Segment segment = read_segment(segments[0]);
  const bool own_frames = !GetParam().ends_with("python3.10") && !GetParam().ends_with("python3.11");
  const int copy_line = marked_line(script, "# COPY subinterpreter");
  const auto copies = segment.of(ApiClass::Copy);
  EXPECT_EQ(copies.size(), 1000u);
  for (const EventRecord& r : copies) {
    ASSERT_NE(r.python_stack, 0u);
    const std::vector<Frame>& stack = segment.stacks.at(r.python_stack);
    if (own_frames) {
      // deep 11 times (levels 10 to 0), then the code's module; its lines count from the quotes.
      ASSERT_EQ(stack.size(), 12u);
      EXPECT_EQ(stack[0].function, "deep");
      EXPECT_EQ(stack[0].line, copy_line - marked_line(script, "CODE = \"\"\"") + 1);
      EXPECT_EQ(stack[10].function, "deep");
      EXPECT_EQ(stack[11].function, "<module>");
    } else {
      ASSERT_EQ(stack.size(), 2u);
      EXPECT_TRUE(stack[0].file.ends_with("subinterpreters.py"));
      EXPECT_EQ(stack[0].function, "main");
      EXPECT_EQ(stack[0].line, marked_line(script, "# RUN subinterpreter"));
      EXPECT_EQ(stack[1].function, "<module>");
    }
  }
}

// The interpreter finalizes while 8 daemon threads copy in a loop 30 frames deep, sampled 1000
// times a second (round 2's pyfinal): the process ends as it would without trainshim, every time.
TEST_P(SamplerPython, TheInterpreterFinalizingUnderThreadsInCudaCallsEndsTheProcessCleanly) {
  const std::string script = std::string(Paths::source) + "/tests/python/sampler_lifecycle.py";
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE(round);
    Scratch s;
    const Segment segment = run_and_read(s, shim_env(s, "1000") + GetParam() + " " + script + " finalize 2>&1");
    ASSERT_TRUE(segment.found);
    EXPECT_EQ(segment.sampler, SamplerState::On);
    EXPECT_GT(segment.of(ApiClass::Copy).size(), 1u);
  }
}

// Threads started and joined in batches of 16 for a second, each making one copy, sampled 1000
// times a second (round 2's pysampler churn): every copy is recorded, each with its thread's frame.
TEST_P(SamplerPython, ThreadsComingAndGoingAreEachRecorded) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/sampler_lifecycle.py";
  Outcome outcome;
  const Segment segment = run_and_read(s, shim_env(s, "1000") + GetParam() + " " + script + " churn 1", &outcome);
  ASSERT_TRUE(segment.found);
  const auto copies = segment.of(ApiClass::Copy);
  EXPECT_EQ(std::to_string(copies.size()), printed(outcome.out, "copies"));
  std::set<uint32_t> threads;
  for (const EventRecord& r : copies) {
    threads.insert(r.tid);
    ASSERT_NE(r.python_stack, 0u);
    const std::vector<Frame> user = from_file(segment.stacks.at(r.python_stack), "sampler_lifecycle.py");
    ASSERT_FALSE(user.empty());
    EXPECT_EQ(user[0].function, "copy");
  }
  EXPECT_GT(threads.size(), 16u);
}

// A plugin host that finalizes the interpreter it embeds and unloads its library (round 2's
// pyunload): the calls made through it carry its frames, and the host's later calls are recorded
// with none, nothing read from the library that was unloaded.
TEST_P(SamplerPython, AHostThatUnloadsItsEmbeddedPythonRunsOnAndIsRecorded) {
  Scratch s;
  const Outcome found =
      run(GetParam() + " -c \"import os, sysconfig; print(os.path.join(sysconfig.get_config_var('LIBDIR'), "
                       "sysconfig.get_config_var('INSTSONAME')))\"");
  ASSERT_EQ(found.exit_code, 0) << found.out;
  const std::string library = found.out.substr(0, found.out.find('\n'));
  ASSERT_TRUE(std::filesystem::exists(library)) << library << ": the interpreter's shared library (libpython3-dev)";
  const std::string script = std::string(Paths::source) + "/tests/python/embedded.py";
  Outcome outcome;
  const Segment segment = run_and_read(
      s, shim_env(s, "200") + program("embedded_python_prog") + " " + library + " " + script + " 2>&1", &outcome);
  ASSERT_TRUE(segment.found);
  EXPECT_NE(outcome.out.find("survived\n"), std::string::npos) << outcome.out;
  // The shim pinned the library whose functions it resolved: what it keeps of them stays valid.
  EXPECT_NE(outcome.out.find("unloaded mapped=yes\n"), std::string::npos) << outcome.out;
  EXPECT_EQ(segment.sampler, SamplerState::On);
  const auto copies = segment.of(ApiClass::Copy);
  ASSERT_EQ(copies.size(), 70u);
  const int line = marked_line(script, "# COPY embedded");
  for (std::size_t i = 0; i < copies.size(); ++i) {
    SCOPED_TRACE(i);
    if (i < 20) {
      ASSERT_NE(copies[i].python_stack, 0u);
      const std::vector<Frame> user = from_file(segment.stacks.at(copies[i].python_stack), "embedded.py");
      ASSERT_GE(user.size(), 3u);
      EXPECT_EQ(user[0].function, "copies");
      EXPECT_EQ(user[0].line, line);
      EXPECT_EQ(user[1].function, "main");
    } else {
      EXPECT_EQ(copies[i].python_stack, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Interpreters, SamplerPython,
                         ::testing::ValuesIn(std::vector<std::string>{TRAINSHIM_TEST_PYTHONS}), [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

}  // namespace
}  // namespace trainshim::test
