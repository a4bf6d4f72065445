// What the report reads of the sampler's tables (samples, threads_now, process_facts, hangs.kind
// and stacks): the straggler's doing, the input wait, the setup checklist, hangs outside
// collectives and `trainshim dump`. Each database holds exactly the rows a test needs.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "commands/commands.hpp"
#include "database.hpp"
#include "diagnose/load_report.hpp"
#include "diagnose/setup.hpp"
#include "errors.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "run_fixtures.hpp"
#include "store/dump.hpp"
#include "store/run_database.hpp"
#include "temp_dir.hpp"

namespace trainshim::cli {
namespace {

using collector::Database;
using Json = nlohmann::ordered_json;

constexpr int64_t kMs = 1'000'000;
constexpr uint64_t kWorld = 0xA11;
// The time of collective k: one per 100 ms step.
constexpr int64_t step_at(int k) { return 1'000 * kMs + k * 100 * kMs; }

const std::string kDataLoader = "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py";

struct Frame {
  std::string file, function;
  int line;
};

class HostReportTest : public test::TempDirTest {
 protected:
  // An all-reduce of `rank` at `begin_ns` and its GPU timing: the rank with the shortest one arrived last.
  static void all_reduce(test::Records& records, int64_t process, uint32_t rank, uint32_t sequence, int64_t begin_ns,
                         uint64_t gpu_ns) {
    EventRecord r{};
    r.api = static_cast<uint16_t>(Api::ncclAllReduce);
    r.object = kWorld;
    r.comm_size = 2;
    r.rank_in_comm = rank;
    r.sequence = sequence;
    records.add(process, r, uint64_t(begin_ns), uint64_t(begin_ns) + 1000);
    r.api = static_cast<uint16_t>(Api::ncclGpuTiming);
    r.detail = gpu_ns;
    records.add(process, r, uint64_t(begin_ns) + 2000, uint64_t(begin_ns) + 3000);
  }

  static void stack(Database& db, int64_t process, uint32_t id, const std::vector<Frame>& innermost_first) {
    for (std::size_t depth = 0; depth < innermost_first.size(); ++depth) {
      const Frame& f = innermost_first[depth];
      db.add_python_frame(process, id, int(depth), f.file, f.function, f.line, "");
    }
    db.add_python_stack(process, id, false, 0);
  }

  // SQL on the closed database, as the collector's ingest of the sampler's records would write it.
  void sql(const std::string& statement) {
    sqlite3* raw = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &raw), SQLITE_OK);
    char* error = nullptr;
    EXPECT_EQ(sqlite3_exec(raw, statement.c_str(), nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
    sqlite3_free(error);
    sqlite3_close(raw);
  }

  void sample(int64_t process, int64_t tid, int64_t at_ns, const char* state, int syscall, int64_t python_stack) {
    samples_ += fmt::format("{}({}, {}, {}, 0, '{}', {}, {})", samples_.empty() ? "" : ", ", process, tid, at_ns, state,
                            syscall, python_stack);
  }
  void store_samples() {
    if (!samples_.empty())
      sql("INSERT INTO samples (process_id, tid, at_ns, tick, state, syscall, python_stack) VALUES " + samples_);
    samples_.clear();
  }
  void facts(int64_t process, const std::map<std::string, std::string>& facts) {
    for (const auto& [key, value] : facts)
      sql(fmt::format("INSERT INTO process_facts (process_id, key, value) VALUES ({}, '{}', '{}')", process, key,
                      value));
  }

  Report report() {
    db_ = std::make_unique<RunDatabase>(path_);
    return load_report(*db_);
  }

  const std::string path_ = dir_ + "/trainshim-unitjob.db";
  std::string samples_;
  std::unique_ptr<RunDatabase> db_;
};

std::vector<std::string> kinds(const Report& r) {
  std::vector<std::string> out;
  for (const Finding& f : r.findings) out.push_back(finding_kind_name(f));
  return out;
}

const Finding* finding(const Report& r, const std::string& kind) {
  for (const Finding& f : r.findings)
    if (finding_kind_name(f) == kind) return &f;
  return nullptr;
}

// Rank 1 arrives 10 ms late at each of 5 all-reduces; `python` says whether its samples have stacks.
class StragglerTest : public HostReportTest {
 protected:
  void write(bool python, bool with_samples = true) {
    {
      Database db(path_, "unitjob");
      r0_ = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
      r1_ = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
      test::Records records(db);
      for (int k = 0; k < 5; ++k) {
        all_reduce(records, r0_, 0, uint32_t(k + 1), step_at(k), 12 * kMs);
        all_reduce(records, r1_, 1, uint32_t(k + 1), step_at(k), 2 * kMs);
      }
      records.store();
      if (python) {
        stack(db, r1_, 1,
              {{"/usr/lib/python3.11/threading.py", "wait", 320},
               {"data.py", "load_batch", 88},
               {"train.py", "train", 12}});
        stack(db, r1_, 2, {{"train.py", "forward_step", 20}, {"train.py", "train", 14}});
      }
      db.commit();
    }
    if (!with_samples) return;
    // In each late window [begin - 10 ms, begin]: five main-thread samples; 23 of the 25 in
    // load_batch sleeping in clock_nanosleep (230), two running in forward_step.
    int n = 0;
    for (int k = 0; k < 5; ++k)
      for (int64_t before : {9, 7, 5, 3, 1}) {
        const bool busy = n == 4 || n == 17;
        sample(r1_, 101, step_at(k) - before * kMs, busy ? "R" : "S", busy ? -1 : 230, python ? (busy ? 2 : 1) : 0);
        ++n;
        // Another thread in the window, and the main thread outside it: neither counts.
        sample(r1_, 150, step_at(k) - before * kMs, "R", -1, python ? 2 : 0);
      }
    for (int k = 0; k < 5; ++k) sample(r1_, 101, step_at(k) - 50 * kMs, "R", -1, python ? 2 : 0);
    store_samples();
  }
  int64_t r0_ = 0, r1_ = 0;
};

TEST_F(StragglerTest, TheStragglersMainThreadIsNamedByItsUserFrameAndItsSyscall) {
  write(true);
  const Report r = report();
  ASSERT_EQ(r.waits.analysis.straggler, 1);
  ASSERT_TRUE(r.waits.straggler_doing);
  const Json doing = render_json(r)["collective_waits"]["straggler_doing"];
  EXPECT_EQ(doing, Json({{"rank", 1},
                         {"thread", "main"},
                         {"function", "load_batch"},
                         {"file", "data.py"},
                         {"line", 88},
                         {"share", 23.0 / 25},
                         {"state", "sleeping"},
                         {"syscall", "clock_nanosleep"},
                         {"samples", 25}}));
  EXPECT_EQ(kinds(r), std::vector<std::string>{"straggler"});
  EXPECT_EQ(finding(r, "straggler")->advice(),
            "while rank 1 was late, its main thread was in load_batch at data.py:88 (92 % of samples), sleeping in "
            "clock_nanosleep");
  EXPECT_NE(render_text(r).find("  While rank 1 was late, its main thread was in load_batch at data.py:88 (92 % of "
                                "samples), sleeping in clock_nanosleep\n"),
            std::string::npos)
      << render_text(r);
}

TEST_F(StragglerTest, AProgramWithoutPythonIsNamedByItsStateAndSyscall) {
  write(false);
  const Report r = report();
  ASSERT_EQ(r.waits.analysis.straggler, 1);
  const Json doing = render_json(r)["collective_waits"]["straggler_doing"];
  EXPECT_EQ(doing["function"], "");
  EXPECT_EQ(doing["file"], "");
  EXPECT_EQ(doing["line"], 0);
  EXPECT_EQ(doing["share"], 23.0 / 25);
  EXPECT_EQ(doing["state"], "sleeping");
  EXPECT_EQ(doing["syscall"], "clock_nanosleep");
  EXPECT_EQ(doing["samples"], 25);
  EXPECT_EQ(finding(r, "straggler")->advice(),
            "while rank 1 was late, its main thread was sleeping in clock_nanosleep (92 % of samples)");
}

TEST_F(StragglerTest, WithoutSamplesTheStragglerKeepsItsOldAdvice) {
  write(true, false);
  const Report r = report();
  ASSERT_EQ(r.waits.analysis.straggler, 1);
  EXPECT_FALSE(r.waits.straggler_doing);
  EXPECT_TRUE(render_json(r)["collective_waits"]["straggler_doing"].is_null());
  EXPECT_EQ(finding(r, "straggler")->advice(),
            "find what rank 1 does on the host before its collectives (data loading, logging, evaluation on one rank)");
  EXPECT_EQ(render_text(r).find("its main thread"), std::string::npos);
}

// One rank, 11 all-reduces 100 ms apart (10 covered steps), and 100 main-thread samples in them:
// `queue` in the workers' queue, `single` loading on the main thread, the rest computing.
class InputWaitTest : public HostReportTest {
 protected:
  void write(int queue, int single, const std::map<std::string, std::string>& process_facts) {
    {
      Database db(path_, "unitjob");
      r0_ = db.add_process("seg-100", *test::header_for(0, 100, "nodeA", 1));
      test::Records records(db);
      for (int k = 0; k <= 10; ++k) all_reduce(records, r0_, 0, uint32_t(k + 1), step_at(k), 5 * kMs);
      records.store();
      // _BaseDataLoaderIter.__next__ -> _MultiProcessingDataLoaderIter._next_data -> _get_data ->
      // _try_get_data -> queue.get, innermost first.
      stack(db, r0_, 1,
            {{"/usr/lib/python3.11/queue.py", "get", 180},
             {kDataLoader, "_try_get_data", 1133},
             {kDataLoader, "_get_data", 1295},
             {kDataLoader, "_next_data", 1458},
             {kDataLoader, "__next__", 701},
             {"/src/train.py", "train", 40},
             {"/src/train.py", "main", 90}});
      // _SingleProcessDataLoaderIter._next_data -> the dataset fetcher -> the user's __getitem__.
      stack(db, r0_, 2,
            {{"/src/data.py", "__getitem__", 30},
             {"/venv/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", "fetch", 52},
             {kDataLoader, "_next_data", 757},
             {kDataLoader, "__next__", 701},
             {"/src/train.py", "train", 41},
             {"/src/train.py", "main", 90}});
      stack(db, r0_, 3, {{"/src/train.py", "train", 50}, {"/src/train.py", "main", 90}});
      db.commit();
    }
    sql(fmt::format("UPDATE processes SET sampler = 'on', sample_hz = 100, samples_torn = 3 WHERE id = {}", r0_));
    for (int i = 0; i < 100; ++i)
      sample(r0_, 100, step_at(0) + i * 10 * kMs, "S", 202, i < queue ? 1 : i < queue + single ? 2 : 3);
    // After the last covered step, and another thread: neither counts.
    for (int i = 0; i < 20; ++i) sample(r0_, 100, step_at(10) + i * kMs, "S", 202, 1);
    for (int i = 0; i < 20; ++i) sample(r0_, 170, step_at(0) + i * kMs, "S", 202, 1);
    store_samples();
    facts(r0_, process_facts);
  }
  int64_t r0_ = 0;
};

TEST_F(InputWaitTest, TheMainThreadsShareInDataLoaderNextAndItsQueue) {
  write(30, 10,
        {{"affinity", "0-3"},
         {"cpus_online", "0-3"},
         {"gpus", "1"},
         {"workers_max", "2"},
         {"workers_seen", "2"},
         {"env.OMP_NUM_THREADS", "4"}});
  const Report r = report();
  const Json rank = render_json(r)["ranks"][0];
  EXPECT_EQ(rank["host"], "nodeA");
  EXPECT_EQ(rank["sampler"], Json({{"state", "on"}, {"hz", 100}, {"samples", 140}, {"torn", 3}, {"not_kept", 0}}));
  EXPECT_EQ(rank["input_wait"], Json({{"share", 0.4},
                                      {"ns_per_step", 40 * kMs},
                                      {"queue_share", 0.75},
                                      {"site", "/src/train.py:40 in train"},
                                      {"steps", 10}}));
  // 4 cores for its one GPU: room for 3 workers beside the main thread.
  const Finding* f = finding(r, "input_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->rank, 0);
  EXPECT_EQ(f->calls, 10);
  EXPECT_EQ(f->cost_ns, 400 * kMs);
  EXPECT_EQ(f->message,
            "rank 0: the main thread waits for the DataLoader 40 % of each step (40.0 ms per step), in next() at "
            "/src/train.py:40 in train (75 % of it for the workers' queue)");
  EXPECT_EQ(f->advice(), "more workers (num_workers up to 3) and a deeper prefetch_factor");
  EXPECT_EQ(kinds(r), (std::vector<std::string>{"input_bound", "setup_dataloader_workers"}));
  const std::string text = render_text(r);
  EXPECT_NE(text.find("  sampler: on at 100 Hz, 140 samples (3 torn (the thread's frames changed while read))\n"
                      "  input wait: 40.0 % of each step (40.0 ms per step, 10 steps), 75 % of it in the workers' "
                      "queue, next() called at /src/train.py:40 in train\n"),
            std::string::npos)
      << text;
}

TEST_F(InputWaitTest, UnderTenPercentIsNoFinding) {
  write(5, 4,
        {{"affinity", "0-3"},
         {"cpus_online", "0-3"},
         {"gpus", "1"},
         {"workers_max", "2"},
         {"workers_seen", "2"},
         {"env.OMP_NUM_THREADS", "4"}});
  const Report r = report();
  ASSERT_TRUE(r.processes[0].host_report.input_wait);
  EXPECT_DOUBLE_EQ(r.processes[0].host_report.input_wait->share(), 0.09);
  EXPECT_EQ(r.processes[0].host_report.input_wait->site, "/src/train.py:40 in train");
  EXPECT_TRUE(r.findings.empty()) << kinds(r).front();
}

TEST_F(InputWaitTest, NoWorkersWhileInputBoundIsTheAdvice) {
  write(0, 50,
        {{"affinity", "0-7"},
         {"cpus_online", "0-7"},
         {"gpus", "1"},
         {"workers_max", "0"},
         {"workers_seen", "0"},
         {"env.OMP_NUM_THREADS", "8"}});
  const Report r = report();
  const Json wait = render_json(r)["ranks"][0]["input_wait"];
  EXPECT_EQ(wait["share"], 0.5);
  EXPECT_EQ(wait["queue_share"], 0.0);
  EXPECT_EQ(wait["site"], "/src/train.py:41 in train");
  EXPECT_EQ(finding(r, "input_bound")->advice(), "DataLoader(num_workers=7): the main thread loads every batch itself");
  const SetupItem& workers = r.setup.front();
  EXPECT_EQ(setup_item_name(workers.item), "dataloader_workers");
  EXPECT_FALSE(workers.ok);
  EXPECT_EQ(workers.observed, "0 workers at most; input wait 50 % of step time; 8 cores per GPU");
}

// The checklist of two ranks on one node.
class SetupTest : public HostReportTest {
 protected:
  void write(const std::map<std::string, std::string>& rank0, const std::map<std::string, std::string>& rank1,
             HostMemory rank0_copies = HostMemory::Pinned) {
    {
      Database db(path_, "unitjob");
      r0_ = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
      r1_ = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
      test::Records records(db);
      for (auto [p, memory] : {std::pair{r0_, rank0_copies}, std::pair{r1_, HostMemory::Pinned}}) {
        EventRecord r{};
        r.api = static_cast<uint16_t>(Api::cudaMemcpyAsync);
        r.bytes = 4096;
        r.direction = static_cast<uint8_t>(Direction::HostToDevice);
        r.host_memory = static_cast<uint8_t>(memory);
        records.add(p, r, 5 * kMs, 6 * kMs);
      }
      records.store();
      db.commit();
    }
    sql("UPDATE processes SET sampler = 'on', sample_hz = 50");
    facts(r0_, rank0);
    facts(r1_, rank1);
  }
  int64_t r0_ = 0, r1_ = 0;
};

const std::map<std::string, std::string> kCleanRank1 = {{"affinity", "32-63"},
                                                        {"cpus_online", "0-63"},
                                                        {"gpus", "2"},
                                                        {"gpu_pci_bus_id", "0000:3b:00.0"},
                                                        {"gpu_numa_node", "1"},
                                                        {"gpu_numa_cpus", "32-63"},
                                                        {"env.OMP_NUM_THREADS", "16"},
                                                        {"workers_max", "4"},
                                                        {"workers_seen", "4"}};

TEST_F(SetupTest, EveryItemThatIsOffIsAWarning) {
  write({{"affinity", "0-31"},
         {"cpus_online", "0-63"},
         {"gpus", "2"},
         {"gpu_pci_bus_id", "0000:1b:00.0"},
         {"gpu_numa_node", "1"},
         {"gpu_numa_cpus", "32-63"},
         {"env.NCCL_P2P_DISABLE", "1"},
         {"env.NCCL_DEBUG", "INFO"},
         {"env.NCCL_SOCKET_IFNAME", "eth0"},
         {"env.NCCL_VERSION", "2.28.3-1"},  // the CUDA container's label: not a setting
         {"env.OMP_NUM_THREADS", "64"},
         {"workers_max", "4"},
         {"workers_seen", "12"}},
        kCleanRank1, HostMemory::Pageable);
  const Report r = report();
  const Json setup = render_json(r)["setup"];
  ASSERT_EQ(setup.size(), 14u);
  auto row = [](int rank, int pid, const char* item, const char* observed, const char* recommended, bool ok) {
    return Json{{"rank", rank}, {"pid", pid}, {"item", item}, {"observed", observed}, {"recommended", recommended},
                {"ok", ok}};
  };
  EXPECT_EQ(setup[0], row(0, 100, "dataloader_workers", "4 workers at most, 12 started; 32 cores per GPU",
                          "persistent_workers=True: 12 worker processes started for at most 4 alive, re-forked each "
                          "epoch",
                          false));
  EXPECT_EQ(setup[1], row(0, 100, "pinned_memory", "1 of 1 H2D copies from pageable memory (4.0 KiB)",
                          "DataLoader(pin_memory=True) and batch.to(device, non_blocking=True)", false));
  EXPECT_EQ(setup[2], row(0, 100, "numa_affinity", "affinity CPUs 0-31, not within NUMA node 1 of its GPU",
                          "taskset/numactl to CPUs 32-63 (NUMA node 1 of GPU 0000:1b:00.0)", false));
  EXPECT_EQ(setup[3], row(0, 100, "omp_threads", "OMP_NUM_THREADS=64, more than the 32 cores per rank",
                          "OMP_NUM_THREADS=32 or fewer (the cores per rank)", false));
  EXPECT_EQ(setup[4], row(0, 100, "nccl_env", "NCCL_DEBUG=INFO, NCCL_P2P_DISABLE=1, NCCL_SOCKET_IFNAME=eth0",
                          "NCCL_DEBUG=WARN (INFO logs every communicator setup); unset NCCL_P2P_DISABLE (it turns off "
                          "NVLink and PCIe peer-to-peer transfers)",
                          false));
  EXPECT_EQ(setup[5], row(0, 100, "ranks_per_node", "2 ranks on nodeA, 2 GPUs",
                          "one rank per GPU: 2 per node (torchrun --nproc_per_node=2)", true));
  EXPECT_EQ(setup[6]["item"], "mixed_precision");
  EXPECT_EQ(setup[6]["observed"], "unknown");
  EXPECT_EQ(setup[6]["ok"], true);
  for (std::size_t i = 7; i < 14; ++i) EXPECT_TRUE(setup[i]["ok"].get<bool>()) << setup[i].dump();
  EXPECT_EQ(setup[9]["observed"], "affinity CPUs 32-63");

  EXPECT_EQ(kinds(r), (std::vector<std::string>{"pageable_copy", "setup_dataloader_workers", "setup_pinned_memory",
                                                "setup_numa_affinity", "setup_omp_threads", "setup_nccl_env"}));
  const Finding* numa = finding(r, "setup_numa_affinity");
  EXPECT_EQ(numa->rank, 0);
  EXPECT_EQ(numa->message,
            "rank 0: CPU affinity against the GPU's NUMA node: affinity CPUs 0-31, not within NUMA node 1 of its GPU");
  EXPECT_EQ(numa->advice(), "taskset/numactl to CPUs 32-63 (NUMA node 1 of GPU 0000:1b:00.0)");

  // --setup: the section alone, and only "setup" in JSON.
  const std::string text = render_setup_text(r);
  EXPECT_TRUE(
      text.starts_with("\nSetup (what every tuning guide checks first)\n  rank 0\n    OFF dataloader_workers  "))
      << text;
  EXPECT_NE(
      text.find("    OFF numa_affinity       affinity CPUs 0-31, not within NUMA node 1 of its GPU\n"
                "                            -> taskset/numactl to CPUs 32-63 (NUMA node 1 of GPU 0000:1b:00.0)\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("    --  mixed_precision     unknown\n"), std::string::npos) << text;
  EXPECT_NE(render_text(r).find(text), std::string::npos);
  EXPECT_EQ(setup_json(r.setup), setup);
}

// Without workers, pin_memory=True would pin each batch in the main thread: the advice says where
// pinning pays.
TEST_F(SetupTest, PinningAdviceForALoaderWithoutWorkersNamesTheWorkers) {
  write({{"workers_max", "0"}}, kCleanRank1, HostMemory::Pageable);
  const Report r = report();
  ASSERT_EQ(r.setup.size(), 14u);
  ASSERT_EQ(r.setup[1].item, SetupItemKind::PinnedMemory);
  EXPECT_FALSE(r.setup[1].ok);
  EXPECT_EQ(r.setup[1].recommended,
            "DataLoader(num_workers>=1, pin_memory=True), whose pin-memory thread pins beside the loop (without "
            "workers the main thread pins each batch, a copy as long as the one it saves), and batch.to(device, "
            "non_blocking=True)");
}

TEST_F(SetupTest, ACleanControlHasNoSetupFinding) {
  std::map<std::string, std::string> rank0 = kCleanRank1;
  rank0["affinity"] = "0-31";
  rank0["gpu_numa_node"] = "0";
  rank0["gpu_numa_cpus"] = "0-31";
  rank0["gpu_pci_bus_id"] = "0000:1b:00.0";
  rank0["env.NCCL_SOCKET_IFNAME"] = "eth0";
  // As torchrun sets it in every rank: the node's two ranks, not two more each.
  rank0["env.LOCAL_WORLD_SIZE"] = "2";
  std::map<std::string, std::string> rank1 = kCleanRank1;
  rank1["env.LOCAL_WORLD_SIZE"] = "2";
  write(rank0, rank1);
  const Report r = report();
  ASSERT_EQ(r.setup.size(), 14u);
  for (const SetupItem& s : r.setup) EXPECT_TRUE(s.ok) << setup_item_name(s.item) << ": " << s.observed;
  EXPECT_EQ(r.setup[5].observed, "2 ranks on nodeA, 2 GPUs");
  EXPECT_EQ(r.setup[4].observed, "NCCL_SOCKET_IFNAME=eth0");
  EXPECT_EQ(r.setup[1].observed, "1 H2D copies, none from pageable memory");
  EXPECT_TRUE(r.findings.empty()) << kinds(r).front();
}

TEST_F(SetupTest, ItemsWithoutDataAreUnknownAndOk) {
  write({{"cpus_online", "0-7"}}, {{"cpus_online", "0-7"}});
  const Report r = report();
  ASSERT_EQ(r.setup.size(), 14u);
  for (std::size_t i : {0u, 2u, 5u, 6u}) {
    EXPECT_EQ(r.setup[i].observed, "unknown") << setup_item_name(r.setup[i].item);
    EXPECT_TRUE(r.setup[i].ok);
  }
  // Two ranks on the node and OMP_NUM_THREADS unset: each starts a thread per core.
  EXPECT_EQ(r.setup[3].observed, "unset: each of the 2 ranks on the node starts a thread per core");
  EXPECT_FALSE(r.setup[3].ok);
  EXPECT_EQ(r.setup[3].recommended, "OMP_NUM_THREADS=4 or fewer (the cores per rank)");
  const Finding* omp = finding(r, "setup_omp_threads");
  ASSERT_NE(omp, nullptr);
  EXPECT_EQ(omp->rank, -1);
  EXPECT_EQ(omp->calls, 2);
  EXPECT_EQ(omp->message,
            "rank 0, rank 1: OpenMP threads: unset: each of the 2 ranks on the node starts a thread per core");
  EXPECT_EQ(kinds(r), std::vector<std::string>{"setup_omp_threads"});
}

TEST_F(SetupTest, FewerRanksThanGpusAndRanksSharingAGpu) {
  write({{"gpus", "8"}, {"env.OMP_NUM_THREADS", "1"}}, {{"gpus", "8"}, {"env.OMP_NUM_THREADS", "1"}});
  Report r = report();
  EXPECT_EQ(r.setup[5].observed, "2 ranks on nodeA, 8 GPUs");
  EXPECT_FALSE(r.setup[5].ok);
  EXPECT_EQ(finding(r, "setup_ranks_per_node")->message, "rank 0, rank 1: ranks per node: 2 ranks on nodeA, 8 GPUs");
  EXPECT_EQ(finding(r, "setup_ranks_per_node")->advice(), "one rank per GPU: 8 per node (torchrun --nproc_per_node=8)");

  // Each sees one GPU (CUDA_VISIBLE_DEVICES), the same one.
  std::filesystem::remove(path_);
  const std::map<std::string, std::string> one = {{"gpus", "1"},
                                                  {"env.CUDA_VISIBLE_DEVICES", "0"},
                                                  {"gpu_pci_bus_id", "0000:1b:00.0"},
                                                  {"env.OMP_NUM_THREADS", "1"}};
  write(one, one);
  r = report();
  EXPECT_EQ(r.setup[5].observed, "2 ranks on nodeA, 1 GPU, ranks sharing 1 GPU");
  EXPECT_FALSE(r.setup[5].ok);
}

TEST(CpuList, KernelListsAndWhatIsNone) {
  EXPECT_EQ(parse_cpulist("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpulist("5"), (std::vector<int>{5}));
  EXPECT_FALSE(parse_cpulist(""));
  EXPECT_FALSE(parse_cpulist("3-1"));
  EXPECT_FALSE(parse_cpulist("a-b"));
  EXPECT_FALSE(parse_cpulist("1,,2"));
}

TEST_F(HostReportTest, AHangOutsideCollectivesShowsEveryRanksStack) {
  const std::string stacks =
      "rank 0 (pid 100) thread 100 sleeping in futex for 61.0 s\n    at wait (/src/loader.py:12)\n"
      "rank 1 (pid 101) thread 101 sleeping in futex for 61.0 s\n    at wait (/src/loader.py:12)";
  {
    Database db(path_, "unitjob");
    db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
    db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
    db.record_hang("", 0, "no_progress", "", "0,1", "", 61'000 * kMs,
                   "no rank progressed for 61.0 s and no collective is pending (ranks 0, 1)", stacks);
    db.commit();
  }
  const Report r = report();
  const Json doc = render_json(r);
  EXPECT_EQ(doc["hangs"][0]["kind"], "no_progress");
  EXPECT_EQ(doc["hangs"][0]["stacks"], stacks);
  ASSERT_EQ(kinds(r), std::vector<std::string>{"hang"});
  const Json& f = doc["findings"][0];
  EXPECT_EQ(f["hang_kind"], "no_progress");
  EXPECT_EQ(f["stacks"], stacks);
  EXPECT_EQ(f["message"], "no rank progressed for 61.0 s and no collective is pending (ranks 0, 1)");
  EXPECT_EQ(f["advice"],
            "every rank is stuck outside NCCL: read each rank's stack (`trainshim dump` while it runs): a DataLoader "
            "whose worker died or deadlocked, a lock or a barrier outside NCCL, or I/O that never returns");
  EXPECT_NE(render_text(r).find("\nHangs (seen by the collector while the job ran)\n"
                                "  no rank progressed for 61.0 s and no collective is pending (ranks 0, 1)\n"
                                "    rank 0 (pid 100) thread 100 sleeping in futex for 61.0 s\n"
                                "        at wait (/src/loader.py:12)\n"
                                "    rank 1 (pid 101) thread 101 sleeping in futex for 61.0 s\n"
                                "        at wait (/src/loader.py:12)\n"),
            std::string::npos)
      << render_text(r);
}

// `trainshim dump`: the latest sample of each thread of the processes that have not ended.
class DumpTest : public HostReportTest {
 protected:
  void write(bool ended_both, int64_t at_unix_ns) {
    {
      Database db(path_, "unitjob");
      r0_ = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
      r1_ = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
      stack(db, r0_, 4, {{"/src/train.py", "spin", 7}, {"/src/train.py", "main", 30}});
      db.update_process(r1_, {.ended = true});
      if (ended_both) db.update_process(r0_, {.ended = true});
      db.commit();
    }
    sql(fmt::format("INSERT INTO threads_now (process_id, tid, at_ns, at_unix_ns, state, syscall, python_stack, "
                    "since_ns) VALUES ({0}, 120, 9000000000, {1}, 'S', 202, 0, 8000000000), "
                    "({0}, 100, 9000000000, {1}, 'R', -1, 4, 5500000000), "
                    "({2}, 101, 9000000000, {1}, 'S', 230, 0, 1000000000)",
                    r0_, at_unix_ns, r1_));
  }
  // The usage error `trainshim dump DB` ends with, or "no error".
  std::string dump_error() const {
    CLI::App app;
    const Command dump = add_dump_command(app);
    app.parse(std::vector<std::string>{path_, "dump"});  // CLI11 reads the vector from its back
    try {
      dump.run();
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no error";
  }
  int64_t r0_ = 0, r1_ = 0;
};

TEST_F(DumpTest, EveryThreadOfTheRunningProcessesWithItsFrames) {
  write(false, 0);
  const RunDatabase db(path_);
  const std::vector<DumpProcess> dump = load_dump(db);
  EXPECT_EQ(render_dump_text(dump), "rank 0 (pid 100) thread 100 (main) running for 3.5 s\n"
                                    "    at spin (/src/train.py:7)\n"
                                    "    at main (/src/train.py:30)\n"
                                    "rank 0 (pid 100) thread 120 sleeping in futex for 1.0 s\n");
  EXPECT_EQ(render_dump_json(dump), Json({{"format", "trainshim-dump/1"},
                                          {"ranks",
                                           {{{"rank", 0},
                                             {"pid", 100},
                                             {"threads",
                                              {{{"tid", 100},
                                                {"main", true},
                                                {"state", "running"},
                                                {"syscall", ""},
                                                {"for_s", 3.5},
                                                {"frames",
                                                 {{{"function", "spin"}, {"file", "/src/train.py"}, {"line", 7}},
                                                  {{"function", "main"}, {"file", "/src/train.py"}, {"line", 30}}}}},
                                               {{"tid", 120},
                                                {"main", false},
                                                {"state", "sleeping"},
                                                {"syscall", "futex"},
                                                {"for_s", 1.0},
                                                {"frames", Json::array()}}}}}}}}));
}

// The command's errors: a job whose processes all ended.
TEST_F(DumpTest, NoRunningProcessIsAnErrorThatSaysSo) {
  write(true, 0);
  EXPECT_EQ(dump_error(), path_ + ": no running process: every process of job unitjob has ended (trainshim report " +
                              path_ + " shows what they did)");
}

// A job whose processes the collector has not stored yet is not said to have ended.
TEST_F(DumpTest, NoProcessStoredYetIsNotSaidToHaveEnded) {
  { Database db(path_, "unitjob"); }
  EXPECT_EQ(dump_error(), path_ + ": no process of job unitjob stored yet: the collector stores each process at its "
                                  "first CUDA call; try again in a second");
}

// A latest sample 12 s old: said on stderr, the stacks printed all the same.
TEST_F(DumpTest, StaleSamplesAreSaidAndStillPrinted) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  write(false, now - 12'000 * kMs);
  CLI::App app;
  const Command dump = add_dump_command(app);
  app.parse(std::vector<std::string>{"--json", path_, "dump"});
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  EXPECT_EQ(dump.run(), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "trainshim: rank 0 (pid 100): the collector has not stored a sample for 12 s: what follows may be "
                 "stale; is trainshim-collector still running?\n");
  const Json doc = Json::parse(out);
  ASSERT_EQ(doc["ranks"].size(), 1u);
  EXPECT_EQ(doc["ranks"][0]["threads"].size(), 2u);
}

TEST_F(DumpTest, RunningProcessesWithoutSamplesAreAnError) {
  write(false, 0);
  sql("DELETE FROM threads_now");
  EXPECT_EQ(dump_error(), path_ + ": no sample of a running process: their sampler is off (TRAINSHIM_SAMPLE_HZ=0) or "
                                  "the collector has stored none yet; try again in a second");
}

// `report --setup --json`: the checklist alone.
TEST_F(SetupTest, ReportSetupJsonIsTheChecklistAlone) {
  write(kCleanRank1, kCleanRank1);
  CLI::App app;
  const Command report = add_report_command(app);
  app.parse(std::vector<std::string>{"--json", "--setup", path_, "report"});
  testing::internal::CaptureStdout();
  EXPECT_EQ(report.run(), 0);
  const Json doc = Json::parse(testing::internal::GetCapturedStdout());
  ASSERT_EQ(doc.size(), 1u);
  ASSERT_EQ(doc["setup"].size(), 14u);
  EXPECT_EQ(doc["setup"][13], Json({{"rank", 1},
                                    {"pid", 101},
                                    {"item", "mixed_precision"},
                                    {"observed", "unknown"},
                                    {"recommended", "torch.autocast('cuda', dtype=torch.bfloat16), or TF32 for FP32 "
                                                    "matmuls (torch.set_float32_matmul_precision('high'))"},
                                    {"ok", true}}));
}

TEST_F(DumpTest, AJobOfAnotherNameIsRefused) {
  write(false, 0);
  CLI::App app;
  const Command dump = add_dump_command(app);
  app.parse(std::vector<std::string>{path_, "other", "--job", "dump"});
  EXPECT_THROW(dump.run(), UsageError);
}

}  // namespace
}  // namespace trainshim::cli
