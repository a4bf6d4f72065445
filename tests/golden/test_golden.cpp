// The `trainshim` command's outputs compared whole, byte for byte, with the files beside this one.
// Update them after an intended change of the output with
//   TRAINSHIM_UPDATE_GOLDEN=1 ctest -R Golden
// (run from the build directory), then read `git diff tests/golden` before committing it.
//
// The run databases are written here, in process, by the collector's own Database (a three-rank
// job with every section of the report filled); the command is the built `trainshim` binary, run
// in the databases' directory on names without a directory, so that no path of a temporary
// directory, time of day or pid reaches the output.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "database.hpp"
#include "gpu_rows.hpp"
#include "hang_watch.hpp"
#include "run_fixtures.hpp"
#include "temp_dir.hpp"

namespace trainshim {
namespace {

using collector::Database;

constexpr uint64_t kWorld = 0xA11;  // the communicator of the three ranks
constexpr int kRanks = 3;
constexpr int kSteps = 4;
constexpr uint64_t kStepNs = 20'000'000;
constexpr uint64_t kFirstStepNs = 10'000'000;
constexpr uint32_t kLoadBatchLine = 41;

// Native and Python stacks, by their ids in each process.
enum Stack : uint32_t { kItem = 1, kSynchronize = 2, kQuery = 3, kLoadBatch = 4, kNonzero = 5, kNextBatch = 6 };

const char* const kDataLoader = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py";

void add_stacks(Database& db, int64_t process) {
  db.add_native_frame(
      process, kItem, 0,
      {0x1000, "/opt/torch/lib/libtorch_cuda.so", "at::native::_local_scalar_dense(at::Tensor const&)", "", 0});
  db.add_native_frame(process, kItem, 1, {0x2000, "/opt/torch/lib/libtorch_python.so", "THPVariable_item", "", 0});
  db.add_python_frame(process, kItem, 0, "/src/train.py", "train_step", 57, "loss_val = loss.item()");
  db.add_python_frame(process, kItem, 1, "/src/train.py", "main", 90, "train_step(model, batch)");
  db.add_native_frame(process, kSynchronize, 0,
                      {0x3000, "/opt/torch/lib/libc10_cuda.so", "c10::cuda::device_synchronize()", "", 0});
  db.add_native_frame(process, kSynchronize, 1,
                      {0x4000, "/opt/torch/lib/libtorch_python.so", "THCPModule_cudaSynchronize", "", 0});
  db.add_python_frame(process, kSynchronize, 0, "/src/train.py", "train_step", 71, "torch.cuda.synchronize()");
  db.add_python_frame(process, kSynchronize, 1, "/src/train.py", "main", 90, "train_step(model, batch)");
  db.add_python_frame(process, kQuery, 0, "/src/train.py", "wait_for_copy", 80, "while not done.query(): pass");
  db.add_python_frame(process, kLoadBatch, 0, "/src/data.py", "load_batch", int(kLoadBatchLine),
                      "batch = batch.to(device)");
  db.add_python_frame(process, kLoadBatch, 1, "/src/train.py", "main", 88, "batch = load_batch(it)");
  db.add_native_frame(process, kNonzero, 0,
                      {0x5000, "/opt/torch/lib/libtorch_cpu.so", "at::_ops::nonzero::call(at::Tensor const&)", "", 0});
  db.add_python_frame(process, kNonzero, 0, "/src/train.py", "train_step", 64, "idx = mask.nonzero()");
  // next(it) on a DataLoader iterator waiting for its workers' queue (torch/utils/data/dataloader.py).
  db.add_python_frame(process, kNextBatch, 0, "/usr/lib/python3.11/queue.py", "get", 180,
                      "self.not_empty.wait(remaining)");
  db.add_python_frame(process, kNextBatch, 1, kDataLoader, "_try_get_data", 1133,
                      "data = self._data_queue.get(timeout=timeout)");
  db.add_python_frame(process, kNextBatch, 2, kDataLoader, "_get_data", 1295, "success, data = self._try_get_data()");
  db.add_python_frame(process, kNextBatch, 3, kDataLoader, "_next_data", 1458, "idx, data = self._get_data()");
  db.add_python_frame(process, kNextBatch, 4, kDataLoader, "__next__", 701, "data = self._next_data()");
  db.add_python_frame(process, kNextBatch, 5, "/src/train.py", "main", 87, "batch = next(it)");
}

EventRecord call(Api api, uint32_t tid) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.tid = tid;
  return r;
}

EventRecord copy(Api api, uint32_t tid, uint64_t bytes, Direction d, HostMemory m) {
  EventRecord r = call(api, tid);
  r.bytes = bytes;
  r.direction = static_cast<uint8_t>(d);
  r.host_memory = static_cast<uint8_t>(m);
  r.stream = 0x7f00;
  return r;
}

EventRecord sync(Api api, uint32_t tid, uint32_t native_stack, uint32_t python_stack) {
  EventRecord r = call(api, tid);
  r.native_stack = native_stack;
  r.python_stack = python_stack;
  return r;
}

EventRecord all_reduce(int rank, uint32_t sequence) {
  EventRecord r = call(Api::ncclAllReduce, 100 + uint32_t(rank));
  r.object = kWorld;
  r.sequence = sequence;
  r.comm_size = kRanks;
  r.rank_in_comm = uint32_t(rank);
  r.bytes = 1 << 20;
  r.detail = 7;  // ncclSum (0) << 8 | ncclFloat32 (7)
  return r;
}

// Rank 0's GPU timeline (CUPTI's records): each step its batch's upload, a GEMM (FP32 in run A,
// BF16 in run B) with an elementwise kernel after it, and a memset; the GPU idles in between.
// Returns the records added.
int64_t add_gpu_timeline(Database& db, test::Records& records, int64_t process, bool after) {
  std::vector<test::GpuRow> gpu;
  for (uint32_t step = 0; step < kSteps; ++step) {
    const uint64_t base = kFirstStepNs + step * kStepNs;
    const uint64_t correlation = 100 * (step + 1);
    gpu.push_back({.api = Api::gpuMemcpy,
                   .start_ns = base + 100'000,
                   .end_ns = base + 900'000,
                   .stream = 7,
                   .bytes = 4 << 20,
                   .direction = Direction::HostToDevice,
                   .host_memory = after ? HostMemory::Pinned : HostMemory::Pageable,
                   .correlation = correlation});
    gpu.push_back({.start_ns = base + 2'500'000,
                   .end_ns = base + 6'500'000,
                   .stream = 7,
                   .name = after ? "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn"
                                 : "ampere_sgemm_128x64_tn",
                   .correlation = correlation + 1});
    gpu.push_back({.start_ns = base + 6'500'000,
                   .end_ns = base + 7'000'000,
                   .stream = 7,
                   .name =
                       "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, "
                       "std::array<char *, (unsigned long)2>>(int, at::native::CUDAFunctorOnSelf_add<float>, "
                       "std::array<char *, (unsigned long)2>)",
                   .correlation = correlation + 2});
    gpu.push_back({.api = Api::gpuMemset,
                   .start_ns = base + 7'000'000,
                   .end_ns = base + 7'100'000,
                   .stream = 13,
                   .bytes = 1024,
                   .correlation = correlation + 3});
  }
  test::add_gpu_rows(db, records, process, gpu);
  return int64_t(gpu.size());
}

// Rank 1's GPU timeline. Each step (from one all-reduce to the next): the batch's upload ends a wait
// for input, a GEMM runs until the sync returns, the host works 1.7 ms before it queues the next
// kernels, then the all-reduce's NCCL kernel and the optimizer. Returns the records added.
int64_t add_rank1_gpu_timeline(Database& db, test::Records& records, int64_t process) {
  std::vector<test::GpuRow> gpu;
  auto kernel = [&](uint64_t start, uint64_t end, const char* name) {
    gpu.push_back({.start_ns = start, .end_ns = end, .stream = 7, .name = name});
  };
  for (uint32_t step = 0; step < kSteps; ++step) {
    const uint64_t base = kFirstStepNs + step * kStepNs;
    gpu.push_back({.api = Api::gpuMemcpy,
                   .start_ns = base + 800'000,
                   .end_ns = base + 1'000'000,
                   .stream = 7,
                   .bytes = 4 << 20,
                   .direction = Direction::HostToDevice,
                   .host_memory = HostMemory::Pinned});
    kernel(base + 1'000'000, base + 1'300'000, "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn");
    kernel(base + 3'000'000, base + 5'000'000, "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn");
    kernel(base + 5'000'000, base + 10'000'000, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
    kernel(base + 10'000'000, base + 18'000'000, "ampere_bf16_s16816gemm_bf16_64x64_sliced1x2_ldg8_f2f_stages_64x5_tn");
  }
  test::add_gpu_rows(db, records, process, gpu);
  return int64_t(gpu.size());
}

// Run A (`after` false), and run B, the same job after a change: rank 0 reads its loss twice a
// step and copies from pinned memory, rank 1 calls nonzero() each step, rank 2 is no longer late.
//
// Each step of each rank: an H2D copy, a sync, one all-reduce of 1 MiB timed on the GPU. Rank 0
// reads its loss (Tensor.item()) and polls a stream; rank 1 reads its loss and calls
// torch.cuda.synchronize(); rank 2 waits 3 ms in an unclassified sync loading its batch just
// before each all-reduce, so that the other two ranks wait 4 ms for it there (the straggler).
// Ranks 0 and 1 then enter all-reduce #5, which rank 2 never reaches: a hang the collector's
// HangWatch reports. Rank 2 lost records to a full ring; rank 1 had collectives it could not time.
void write_run(const std::string& path, bool after) {
  Database db(path, "unitjob");
  collector::HangWatch hangs(2'000'000'000);
  test::Records records(db);
  for (int rank = kRanks - 1; rank >= 0; --rank) {  // added out of order: the outputs order by rank
    const int64_t p = db.add_process("seg-" + std::to_string(100 + rank),
                                     *test::header_for(rank, 100 + rank, rank == 2 ? "nodeB" : "nodeA", kRanks));
    add_stacks(db, p);
    const uint32_t main_thread = 100 + uint32_t(rank);
    int64_t events = 0;
    auto add = [&](const EventRecord& r, uint64_t begin, uint64_t duration) {
      records.add(p, r, begin, begin + duration);
      ++events;
    };
    for (uint32_t step = 0; step < kSteps; ++step) {
      const uint64_t base = kFirstStepNs + step * kStepNs;
      const bool pageable = rank == 0 && !after;
      add(copy(Api::cudaMemcpyAsync, main_thread, 4 << 20, Direction::HostToDevice,
               pageable ? HostMemory::Pageable : HostMemory::Pinned),
          base, pageable ? 800'000 : 50'000);
      if (rank == 0) {
        add(sync(Api::cudaStreamSynchronize, main_thread, kItem, kItem), base + 1'000'000, 300'000);
        if (after) add(sync(Api::cudaStreamSynchronize, main_thread, kItem, kItem), base + 1'500'000, 300'000);
        add(sync(Api::cudaStreamQuery, main_thread, 0, kQuery), base + 2'000'000, 2'000);
      }
      if (rank == 1) {
        add(sync(Api::cudaStreamSynchronize, main_thread, kItem, kItem), base + 1'000'000, 250'000);
        if (after) add(sync(Api::cudaStreamSynchronize, main_thread, kNonzero, kNonzero), base + 1'500'000, 100'000);
        add(sync(Api::cudaDeviceSynchronize, main_thread, kSynchronize, kSynchronize), base + 2'000'000, 400'000);
      }
      if (rank == 2)
        add(sync(Api::cudaStreamSynchronize, main_thread, 0, kLoadBatch), base + 2'000'000,
            after ? 300'000 : 3'000'000);
      // The last rank to arrive has the shortest GPU duration: every rank's ends together.
      const EventRecord collective = all_reduce(rank, step + 1);
      const uint64_t at = base + 5'000'000;
      add(collective, at, 100'000);
      hangs.observe(rank, collective, int64_t(at), "train.py:95");
      EventRecord timing = collective;
      timing.api = static_cast<uint16_t>(Api::ncclGpuTiming);
      timing.detail = rank == 2 && !after ? 1'000'000 : 5'000'000;
      add(timing, at, 100'000);
      hangs.observe(rank, timing, int64_t(at), "");
    }
    const uint64_t end = kFirstStepNs + kSteps * kStepNs;
    if (rank == 2) {
      hangs.note_activity(rank, "cudaStreamSynchronize", "/src/data.py:" + std::to_string(kLoadBatchLine),
                          int64_t(end));
    } else {
      const EventRecord hung = all_reduce(rank, kSteps + 1);
      add(hung, end, 100'000);
      hangs.observe(rank, hung, int64_t(end), "train.py:95");
    }
    if (rank == 0) events += add_gpu_timeline(db, records, p, after);
    if (rank == 1) events += add_rank1_gpu_timeline(db, records, p);
    db.update_process(p, {.events = uint64_t(events),
                          .dropped_ring_full = rank == 2 ? 17u : 0u,
                          .untimed_no_event = rank == 1 ? 2u : 0u,
                          .gpu_records_dropped = rank == 0 ? 3u : 0u,
                          .python_stacks = python_stacks_word(PythonStacks::Available, 11),
                          // Rank 2's CUPTI was held by another client.
                          .gpu_timeline = uint32_t(rank == 2 ? GpuTimeline::Taken : GpuTimeline::On),
                          .ended = rank != 0});
  }
  // As the collector's watch_hangs() stores what it finds, 30 s after the hung all-reduce began.
  for (const collector::Hang& h : hangs.check(int64_t(kFirstStepNs + kSteps * kStepNs) + 30'000'000'000))
    db.record_hang(fmt::format("{:016x}", h.communicator), h.sequence, "collective", h.op,
                   collector::rank_list(h.waiting), collector::rank_list(h.missing), h.waited_ns, h.message, "");
  records.store();
  db.commit();
}

void sql(const std::string& path, const std::string& statement) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(raw, statement.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(raw);
}

// What the sampler of each rank adds to run A, as the collector stores it (process ids 1, 2, 3 are
// ranks 2, 1, 0: added in that order). Rank 2's main thread waits in futex in load_batch in each of
// its late windows (from 4 ms before each all-reduce); rank 1's waits for its DataLoader's queue
// 3 samples of 10 in each step; rank 0 runs on CPUs outside its GPU's NUMA node with its workers
// re-forked each epoch, rank 1 with NCCL_P2P_DISABLE=1. Rank 0, still running, spins in main.
void add_sampler_rows(const std::string& path) {
  std::string samples;
  auto sample = [&](int process, int tid, uint64_t at, const char* state, int syscall, uint32_t stack) {
    samples += fmt::format("{}({}, {}, {}, 0, '{}', {}, {})", samples.empty() ? "" : ", ", process, tid, at, state,
                           syscall, stack);
  };
  for (uint32_t step = 0; step < kSteps; ++step) {
    const uint64_t base = kFirstStepNs + step * kStepNs;
    for (uint64_t at : {2'500'000u, 3'500'000u, 4'500'000u}) sample(1, 102, base + at, "S", 202, kLoadBatch);
    sample(1, 102, base + 12'000'000, "R", -1, kItem);
    for (uint64_t i = 0; i < 10; ++i)
      sample(2, 101, base + 5'000'000 + i * 2'000'000, "S", i < 3 ? 202 : -1, i < 3 ? kNextBatch : kItem);
  }
  sql(path, "INSERT INTO samples (process_id, tid, at_ns, tick, state, syscall, python_stack) VALUES " + samples);
  sql(path, "UPDATE processes SET sampler = 'on', sample_hz = 50; UPDATE processes SET samples_torn = 2 WHERE id = 2");
  const char* const facts[][3] = {{"3", "affinity", "8-15"},
                                  {"3", "cpus_online", "0-15"},
                                  {"3", "gpus", "2"},
                                  {"3", "gpu_pci_bus_id", "0000:3b:00.0"},
                                  {"3", "gpu_numa_node", "0"},
                                  {"3", "gpu_numa_cpus", "0-7"},
                                  {"3", "env.OMP_NUM_THREADS", "4"},
                                  {"3", "workers_max", "2"},
                                  {"3", "workers_seen", "6"},
                                  {"2", "affinity", "0-7"},
                                  {"2", "cpus_online", "0-15"},
                                  {"2", "gpus", "2"},
                                  {"2", "gpu_pci_bus_id", "0000:1b:00.0"},
                                  {"2", "gpu_numa_node", "0"},
                                  {"2", "gpu_numa_cpus", "0-7"},
                                  {"2", "env.OMP_NUM_THREADS", "4"},
                                  {"2", "env.NCCL_P2P_DISABLE", "1"},
                                  {"2", "env.NCCL_SOCKET_IFNAME", "eth0"},
                                  {"2", "workers_max", "2"},
                                  {"2", "workers_seen", "2"}};
  for (const auto& f : facts)
    sql(path,
        fmt::format("INSERT INTO process_facts (process_id, key, value) VALUES ({}, '{}', '{}')", f[0], f[1], f[2]));
  sql(path, "UPDATE hangs SET stacks = 'rank 2 (pid 102) thread 102 sleeping in futex for 30.0 s\n"
            "    at load_batch (/src/data.py:41)\n    at main (/src/train.py:88)'");
  sql(path,
      "INSERT INTO threads_now (process_id, tid, at_ns, at_unix_ns, state, syscall, python_stack, since_ns) "
      "VALUES (3, 100, 95000000000, 0, 'R', -1, 1, 33500000000), (3, 130, 95000000000, 0, 'S', 202, 0, 93800000000)");
}

struct Output {
  std::string text;
  int exit_code = -1;
};

// `trainshim ARGUMENTS`, run in `dir`: its standard output and exit code. TRAINSHIM_STEP, which
// would name the step, is left out of its environment, and the text is fitted to 100 columns
// whatever COLUMNS the test was started with.
Output trainshim(const std::string& dir, const std::string& arguments) {
  const std::string command =
      "cd '" + dir + "' && env -u TRAINSHIM_STEP COLUMNS=100 NO_COLOR=1 '" TRAINSHIM_CLI "' " + arguments;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot run " + command);
  Output out;
  char buffer[65536];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.text.append(buffer, n);
  const int status = pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

bool updating() {
  const char* update = std::getenv("TRAINSHIM_UPDATE_GOLDEN");
  return update && *update && std::string(update) != "0";
}

// The whole output against tests/golden/<name>; with TRAINSHIM_UPDATE_GOLDEN=1 the file is
// rewritten instead.
void expect_golden(const std::string& name, const std::string& actual) {
  const std::filesystem::path file = std::filesystem::path(TRAINSHIM_GOLDEN_DIR) / name;
  if (updating()) {
    std::ofstream(file, std::ios::binary) << actual;
    std::printf("rewrote %s\n", file.c_str());
    return;
  }
  std::ifstream in(file, std::ios::binary);
  ASSERT_TRUE(in) << file << " is missing: write it with TRAINSHIM_UPDATE_GOLDEN=1 ctest -R Golden";
  std::ostringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "the output differs from " << file
                                    << "; if the change is intended: TRAINSHIM_UPDATE_GOLDEN=1 ctest -R Golden";
}

class Golden : public test::TempDirTest {
 protected:
  void SetUp() override {
    write_run(dir_ + "/a.db", false);
    add_sampler_rows(dir_ + "/a.db");
    write_run(dir_ + "/b.db", true);
  }
};

TEST_F(Golden, ReportText) {
  const Output out = trainshim(dir_, "report a.db");
  EXPECT_EQ(out.exit_code, 0);
  expect_golden("report.txt", out.text);
}

TEST_F(Golden, ReportJson) {
  const Output out = trainshim(dir_, "report --json a.db");
  EXPECT_EQ(out.exit_code, 0);
  expect_golden("report.json", out.text);
}

// The verdict alone with one cause: the straggler, which that cause does not name, on its own line.
TEST_F(Golden, ReportSummaryText) {
  const Output out = trainshim(dir_, "report a.db --summary --top 1");
  EXPECT_EQ(out.exit_code, 0);
  expect_golden("summary.txt", out.text);
  // In colour, the same text with its heading in bold and its severity in red.
  const Output colored = trainshim(dir_, "report a.db --summary --top 1 --color always");
  EXPECT_NE(colored.text.find("\x1b[1mWhat to fix first"), std::string::npos) << colored.text;
  EXPECT_NE(colored.text.find("\x1b[1;31m[high]\x1b[0m"), std::string::npos) << colored.text;
  EXPECT_EQ(std::regex_replace(colored.text, std::regex("\x1b\\[[0-9;]*m"), ""), out.text);
}

TEST_F(Golden, ReportSetupText) {
  const Output out = trainshim(dir_, "report --setup a.db");
  EXPECT_EQ(out.exit_code, 0);
  expect_golden("setup.txt", out.text);
}

// Rank 0 is still running: its threads' latest samples (the stale-sample warning goes to stderr).
TEST_F(Golden, DumpText) {
  const Output out = trainshim(dir_, "dump a.db 2>/dev/null");
  EXPECT_EQ(out.exit_code, 0);
  expect_golden("dump.txt", out.text);
}

TEST_F(Golden, DiffText) {
  const Output out = trainshim(dir_, "diff a.db b.db");
  EXPECT_EQ(out.exit_code, 0);
  expect_golden("diff.txt", out.text);
}

// Run A breaks the default policy (its straggler's waits, the lost records): exit code 1.
// The suites' time is what this audit took: masked, and checked to be a number of seconds.
TEST_F(Golden, AuditJunit) {
  const Output out = trainshim(dir_, "audit a.db --format junit");
  EXPECT_EQ(out.exit_code, 1);
  const std::regex suite_time(R"( time="[0-9]+\.[0-9]{3}">)");
  EXPECT_EQ(std::distance(std::sregex_iterator(out.text.begin(), out.text.end(), suite_time), std::sregex_iterator()),
            2)
      << out.text;
  expect_golden("audit.junit.xml", std::regex_replace(out.text, suite_time, R"( time="SECONDS">)"));
}

TEST_F(Golden, ChromeTrace) {
  const Output out = trainshim(dir_, "export a.db --format chrome -o -");
  EXPECT_EQ(out.exit_code, 0);
  expect_golden("trace.json", out.text);
}

// The metrics Prometheus reads, in its text format and in OpenMetrics. How long reading the
// database took is the one figure that changes from run to run: checked to be a number of
// seconds, and written as 0. tests/prometheus lints metrics.prom with promtool.
TEST_F(Golden, Metrics) {
  const std::regex took(R"re((trainshim_metrics_compute_seconds\{job="[^"]*"\}) [0-9]+(\.[0-9]+)?(e-[0-9]+)?\n)re");
  using FormatFile = std::pair<const char*, const char*>;
  for (const auto& [format, file] :
       std::initializer_list<FormatFile>{{"prometheus", "metrics.prom"}, {"openmetrics", "metrics.openmetrics.txt"}}) {
    const Output out = trainshim(dir_, std::string("metrics --once --format ") + format + " a.db");
    EXPECT_EQ(out.exit_code, 0);
    EXPECT_EQ(std::distance(std::sregex_iterator(out.text.begin(), out.text.end(), took), std::sregex_iterator()), 1)
        << out.text;
    expect_golden(file, std::regex_replace(out.text, took, "$1 0\n"));
  }
}

}  // namespace
}  // namespace trainshim
