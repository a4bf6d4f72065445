// The GPU timeline in `trainshim report`: planted timelines (the GPU's activity as CUPTI records
// it, the host's calls as the shim does) written into a run database, read back with exact
// figures: busy and idle shares, each idle gap's cause and site, sync bubbles, the findings.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "analyse/steps.hpp"
#include "database.hpp"
#include "diagnose/load_report.hpp"
#include "render/kineto.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "run_fixtures.hpp"
#include "store/run_database.hpp"
#include "temp_dir.hpp"

namespace trainshim::cli {
namespace {

using collector::Database;
using Json = nlohmann::ordered_json;

constexpr int64_t kMs = 1'000'000;
constexpr uint32_t kThread = 7;

// Stacks by their ids in the process.
enum Stack : uint32_t { kItem = 1, kUpload = 2, kAllReduce = 3, kGraph = 4 };

// One process's run: host calls through the collector's Database (as the collector stores them),
// then the GPU's activities and the timeline's state written into the file as the collector
// writes them (`gpu_activities`, `processes.gpu_timeline`).
class TimelineRun {
 public:
  TimelineRun(const std::string& path, int rank) : path_(path) {
    db_ = std::make_unique<Database>(path, "unitjob");
    records_ = std::make_unique<test::Records>(*db_);
    process_ = db_->add_process("seg-" + std::to_string(rank), *test::header_for(rank, 100 + rank, "nodeA", 4));
    db_->add_native_frame(
        process_, kItem, 0,
        {0x1000, "/opt/torch/lib/libtorch_cuda.so", "at::native::_local_scalar_dense(at::Tensor const&)", "", 0});
    db_->add_native_frame(process_, kItem, 1, {0x2000, "/opt/torch/lib/libtorch_python.so", "THPVariable_item", "", 0});
    db_->add_python_frame(process_, kItem, 0, "/src/train.py", "train_step", 57, "loss_val = loss.item()");
    db_->add_python_frame(process_, kUpload, 0, "/src/train.py", "train", 40, "x = x.to(device)");
    db_->add_python_frame(process_, kAllReduce, 0, "/src/train.py", "train", 70, "dist.all_reduce(grad)");
    db_->add_python_frame(process_, kGraph, 0, "/src/train.py", "train_step", 80, "with torch.cuda.graph(g):");
    db_->add_python_string(process_, 901, "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
    db_->add_python_string(process_, 902, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn");
    db_->add_python_string(process_, 903, "ampere_sgemm_128x64_tn");
  }

  void item(int64_t begin, int64_t end) { add(call(Api::cudaStreamSynchronize, kItem, kItem), begin, end); }
  void upload(int64_t begin, int64_t end, HostMemory memory) {
    EventRecord r = call(Api::cudaMemcpyAsync, 0, kUpload);
    r.bytes = 4 << 20;
    r.direction = uint8_t(Direction::HostToDevice);
    r.host_memory = uint8_t(memory);
    r.stream = 0x7f00;
    r.object = 1;
    add(r, begin, end);
  }
  // torch.cuda.graph's __enter__: a device sync, then a stream capture from `begin` to `end` (its
  // begin, its end, the graph's instantiation in the last millisecond), all at the with line.
  void graph_sync(int64_t begin, int64_t end) { add(call(Api::cudaDeviceSynchronize, 0, kGraph), begin, end); }
  void capture(int64_t begin, int64_t end, uint64_t stream = kCaptureStream) {
    add(on_stream(call(Api::cudaStreamBeginCapture, 0, kGraph), stream), begin, begin + 10'000);
    add(on_stream(call(Api::cudaStreamEndCapture, 0, kGraph), stream), end - kMs, end - kMs + 10'000);
    add(call(Api::cudaGraphInstantiateWithFlags, 0, kGraph), end - kMs + 10'000, end);
  }
  // A capture refused at its begin (cudaErrorStreamCaptureUnsupported), then ended in vain
  // (cudaErrorIllegalState), on `stream`.
  void refused_capture(int64_t begin, int64_t end, uint64_t stream) {
    EventRecord refused = on_stream(call(Api::cudaStreamBeginCapture, 0, kGraph), stream);
    refused.result = 900;
    add(refused, begin, begin + 10'000);
    EventRecord in_vain = on_stream(call(Api::cudaStreamEndCapture, 0, kGraph), stream);
    in_vain.result = 401;
    add(in_vain, end - 10'000, end);
  }
  // A cudaStreamEndCapture that failed (cudaErrorInvalidValue: no graph pointer), the capture
  // running on.
  void failed_end(int64_t at, uint64_t stream) {
    EventRecord failed = on_stream(call(Api::cudaStreamEndCapture, 0, kGraph), stream);
    failed.result = 1;
    add(failed, at, at + 10'000);
  }
  static constexpr uint64_t kCaptureStream = 0x5700;
  // A Launch record: the first kernel launch on the thread since its last sync.
  void launch(int64_t begin) { launches_.push_back(begin); }
  void all_reduce(int64_t begin, uint32_t sequence) {
    EventRecord r = call(Api::ncclAllReduce, 0, kAllReduce);
    r.object = 0xA11;
    r.sequence = sequence;
    r.comm_size = 4;
    r.bytes = 1 << 20;
    add(r, begin, begin + 50'000);
  }

  enum Kernel { kBf16Gemm = 902, kNccl = 901, kFp32Gemm = 903 };
  void kernel(int64_t start, int64_t end, Kernel name = kBf16Gemm) {
    activities_.push_back({"gpuKernel", start, end, HostMemory::Unknown, name});
  }
  void gpu_upload(int64_t start, int64_t end, HostMemory memory) {
    activities_.push_back({"gpuMemcpy", start, end, memory, 0});
  }
  // The shim turned the timeline on or off.
  void timeline_edge(int64_t at, bool on) { add(call(on ? Api::gpuTimelineOn : Api::gpuTimelineOff, 0, 0), at, at); }

  // Stores everything; `timeline`: processes.gpu_timeline.
  void finish(const std::string& timeline) {
    db_->update_process(process_, {.events = 1, .ended = true});
    records_->store();
    db_->commit();
    records_.reset();
    db_.reset();
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    std::string sql = fmt::format("UPDATE processes SET gpu_timeline = '{}';", timeline);
    // A database of a trainshim whose shim records launches names cudaLaunchKernel of class launch.
    sql += "INSERT INTO apis (id, name, class) SELECT 60000, 'cudaLaunchKernel', 'launch' WHERE NOT EXISTS (SELECT 1 "
           "FROM apis WHERE name = 'cudaLaunchKernel');";
    for (const int64_t begin : launches_)
      sql += fmt::format(
          "INSERT INTO events (process_id, tid, api, begin_ns, end_ns, bytes, direction, host_memory, stream, object, "
          "detail, rank_in_comm, comm_size, result, native_stack, python_stack, sequence, peer, flags, follows_copy, "
          "exchange) SELECT {}, {}, id, {}, {}, 0, 0, 0, 7, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 FROM apis WHERE name = "
          "'cudaLaunchKernel';",
          process_, kThread, begin, begin + 10'000);
    for (const Activity& a : activities_)
      sql += fmt::format(
          "INSERT INTO gpu_activities (process_id, api, start_ns, end_ns, device, stream, bytes, direction, "
          "host_memory, name, correlation) SELECT {}, (SELECT id FROM apis WHERE name = '{}'), {}, {}, 0, 7, {}, "
          "(SELECT id FROM directions WHERE name = '{}'), (SELECT id FROM host_memories WHERE name = '{}'), {}, 0;",
          process_, a.api, a.start, a.end, a.name ? 0 : 4 << 20, a.name ? "none" : "h2d", host_memory_name(a.memory),
          a.name);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }

 private:
  struct Activity {
    const char* api;
    int64_t start, end;
    HostMemory memory;
    int name;
  };
  static EventRecord call(Api api, uint32_t native_stack, uint32_t python_stack) {
    EventRecord r{};
    r.api = uint16_t(api);
    r.tid = kThread;
    r.native_stack = native_stack;
    r.python_stack = python_stack;
    return r;
  }
  static EventRecord on_stream(EventRecord r, uint64_t stream) {
    r.stream = stream;
    return r;
  }
  void add(const EventRecord& r, int64_t begin, int64_t end) { records_->add(process_, r, begin, end); }

  std::string path_;
  std::unique_ptr<Database> db_;
  std::unique_ptr<test::Records> records_;
  int64_t process_ = 0;
  std::vector<Activity> activities_;
  std::vector<int64_t> launches_;
};

class GpuTimelineTest : public test::TempDirTest {
 protected:
  Json first_rank(const Report& report) { return render_json(report)["ranks"][0]; }
  // The first rank's `gpu` of the report on the database at path_.
  Json gpu_of_database() {
    RunDatabase db(path_);
    return first_rank(load_report(db))["gpu"];
  }
  std::vector<Json> findings_of(const Report& report, const std::string& kind) {
    std::vector<Json> out;
    const Json doc = render_json(report);
    for (const Json& f : doc["findings"])
      if (f["kind"] == kind) out.push_back(f);
    return out;
  }

  const std::string path_ = dir_ + "/trainshim-unitjob.db";
};

constexpr int64_t kStart = 1'000 * kMs;
constexpr int kAllReduces = 6;  // 5 steps between them

// Rank 2 of a DDP job, 100 ms a step from one all-reduce to the next: the NCCL kernel (5 ms), the
// optimizer (5 ms), then the host loads the next batch for 30 ms with the GPU idle, uploads it
// (1 ms on the GPU) and the forward and backward run to the next all-reduce.
void write_starved_rank(TimelineRun& run, HostMemory memory) {
  for (int k = 0; k < kAllReduces; ++k) {
    const int64_t t = kStart + k * 100 * kMs;
    run.all_reduce(t, uint32_t(k + 1));
    run.kernel(t, t + 5 * kMs, TimelineRun::kNccl);
    run.kernel(t + 5 * kMs, t + 10 * kMs);
    if (k == kAllReduces - 1) break;
    run.upload(t + 40 * kMs, t + 40 * kMs + 20'000, memory);
    run.gpu_upload(t + 40 * kMs, t + 41 * kMs, memory);
    run.kernel(t + 41 * kMs, t + 70 * kMs);
    run.kernel(t + 70 * kMs, t + 100 * kMs);
  }
}

TEST_F(GpuTimelineTest, DataLoadingGapBeforeEachUpload) {
  {
    TimelineRun run(path_, 2);
    write_starved_rank(run, HostMemory::Pageable);
    run.finish("on");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const Json gpu = first_rank(report)["gpu"];
  EXPECT_EQ(gpu["timeline"], "on");
  EXPECT_TRUE(gpu["why_none"].is_null());
  EXPECT_EQ(gpu["covered_steps"], 5);
  EXPECT_NEAR(gpu["busy_share"].get<double>(), 0.70, 1e-9);
  EXPECT_NEAR(gpu["communication_share"].get<double>(), 0.05, 1e-9);
  EXPECT_NEAR(gpu["idle_share"].get<double>(), 0.30, 1e-9);
  EXPECT_EQ(gpu["idle_ns_per_step"], 30 * kMs);
  EXPECT_NEAR(gpu["idle_by_cause"]["data_loading"].get<double>(), 0.30, 1e-9);
  for (const char* other : {"sync", "pageable_copy", "collective", "host"})
    EXPECT_EQ(gpu["idle_by_cause"][other], 0.0) << other;
  EXPECT_EQ(gpu["gap_threshold_ns"], 5 * kMs);
  EXPECT_EQ(gpu["gaps_above_threshold"], 5);
  ASSERT_EQ(gpu["gaps"].size(), 5u);
  for (int k = 0; k < 5; ++k) {
    const Json& gap = gpu["gaps"][std::size_t(k)];
    EXPECT_EQ(gap["step"], k);
    EXPECT_EQ(gap["start_ns"], 10 * kMs);
    EXPECT_EQ(gap["duration_ns"], 30 * kMs);
    EXPECT_EQ(gap["cause"], "data_loading");
    EXPECT_EQ(gap["site"], "/src/train.py:40 in train");
  }
  // The five gaps are one group: one cause, one site.
  ASSERT_EQ(gpu["gap_groups"].size(), 1u);
  const Json& group = gpu["gap_groups"][0];
  EXPECT_EQ(group["cause"], "data_loading");
  EXPECT_EQ(group["site"], "/src/train.py:40 in train");
  EXPECT_EQ(group["count"], 5);
  EXPECT_EQ(group["total_ns"], 5 * 30 * kMs);
  EXPECT_EQ(group["shortest_ns"], 30 * kMs);
  EXPECT_EQ(group["longest_ns"], 30 * kMs);
  EXPECT_EQ(group["steps"], 5);
  EXPECT_EQ(group["first_step"], 0);
  EXPECT_EQ(group["last_step"], 4);

  const std::vector<Json> starvation = findings_of(report, "data_starvation");
  ASSERT_EQ(starvation.size(), 1u);
  EXPECT_EQ(starvation[0]["rank"], 2);
  EXPECT_EQ(starvation[0]["calls"], 5);
  EXPECT_EQ(starvation[0]["cost_ns"], 6 * 30 * kMs);  // 30 ms per step, over the rank's 6 steps
  EXPECT_EQ(starvation[0]["message"],
            "rank 2: the GPU is idle 30 % of each step waiting for input (the gap before each batch's upload at "
            "/src/train.py:40 in train); the batches come from pageable memory (DataLoader pin_memory=False)");
  // The loader first: the gap is its time; pinning shortens only the upload after it.
  EXPECT_EQ(starvation[0]["advice"],
            "more DataLoader workers (num_workers) and a deeper prefetch_factor: each batch keeps the GPU waiting "
            "30.0 ms; then DataLoader(pin_memory=True) and batch.to(device, non_blocking=True), so that the upload "
            "overlaps compute");
  EXPECT_TRUE(findings_of(report, "gpu_timeline").empty());

  // Kernels over every recorded one: 16 bf16 GEMMs (325 ms) and 6 NCCL kernels (30 ms) in 360 ms busy.
  ASSERT_EQ(gpu["top_kernels"].size(), 2u);
  EXPECT_EQ(gpu["top_kernels"][0]["name"], "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn");
  EXPECT_EQ(gpu["top_kernels"][0]["count"], 16);
  EXPECT_EQ(gpu["top_kernels"][0]["total_ns"], 325 * kMs);
  EXPECT_NEAR(gpu["top_kernels"][0]["share"].get<double>(), 325.0 / 360.0, 1e-9);
  EXPECT_EQ(gpu["top_kernels"][1]["name"], "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(gpu["top_kernels"][1]["total_ns"], 30 * kMs);
  EXPECT_EQ(gpu["fp32_gemm_share"], 0.0);
  EXPECT_TRUE(findings_of(report, "fp32_gemm").empty());

  const std::string text = render_text(report);
  EXPECT_NE(text.find("  GPU busy 70.0 % of each step (communication 5.0 %), idle 30.0 % (data loading 30.0 %): 5 "
                      "steps on the GPU timeline, 30.0 ms idle per step\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  Idle gaps of 5.0 ms or more (5)                  gaps   shortest    longest     in all\n"
                      "  data loading                                        5    30.0 ms    30.0 ms   150.0 ms\n"
                      "      in 5 of 5 covered steps (0 to 4), the host came back at /src/train.py:40 in train\n"),
            std::string::npos)
      << text;
}

// The same rank with pinned batches: the remedies are the loader's alone.
// The Kineto trace of the starved rank: its file and rank, and the GPU's records of the 5 covered
// steps in torch.profiler's layout (the NCCL kernel at the sixth all-reduce, after them, left out).
TEST_F(GpuTimelineTest, KinetoTraceHoldsTheCoveredStepsRecords) {
  {
    TimelineRun run(path_, 2);
    write_starved_rank(run, HostMemory::Pageable);
    run.finish("on");
  }
  RunDatabase db(path_);
  std::vector<std::pair<std::string, Json>> traces;
  for_each_kineto_trace(db, "", [&](const std::string& file, const Json& trace) { traces.emplace_back(file, trace); });
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].first, "rank2.json");
  const Json& trace = traces[0].second;
  EXPECT_EQ(trace["distributedInfo"], (Json{{"backend", "nccl"}, {"rank", 2}, {"world_size", 4}}));
  EXPECT_EQ(trace["trainshim"]["covered_steps"], 5);
  const Json& events = trace["traceEvents"];
  ASSERT_EQ(events.size(), 25u);
  EXPECT_EQ(events[0], (Json{{"ph", "X"},
                             {"cat", "kernel"},
                             {"name", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"},
                             {"pid", 0},
                             {"tid", 7},
                             {"ts", 1'000'000.0},
                             {"dur", 5'000.0},
                             {"args", {{"device", 0}, {"stream", 7}, {"correlation", 0}}}}));
  EXPECT_EQ(events[2]["cat"], "gpu_memcpy");
  EXPECT_EQ(events[2]["name"], "Memcpy HtoD (Pageable -> Device)");
  EXPECT_EQ(events[2]["args"]["bytes"], 4 << 20);
  EXPECT_EQ(events[24]["name"], "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn");
  EXPECT_EQ(events[24]["ts"].get<double>() + events[24]["dur"].get<double>(), 1'500'000.0) << "the last step's end";
}

TEST_F(GpuTimelineTest, PinnedInputIsNotToldToPin) {
  {
    TimelineRun run(path_, 2);
    write_starved_rank(run, HostMemory::Pinned);
    run.finish("on");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const std::vector<Json> starvation = findings_of(report, "data_starvation");
  ASSERT_EQ(starvation.size(), 1u);
  EXPECT_EQ(starvation[0]["message"],
            "rank 2: the GPU is idle 30 % of each step waiting for input (the gap before each batch's upload at "
            "/src/train.py:40 in train)");
  EXPECT_EQ(starvation[0]["advice"],
            "more DataLoader workers (num_workers) and a deeper prefetch_factor: each batch keeps the GPU waiting "
            "30.0 ms");
}

// --idle-gap-ms above the gaps: none listed, the idle time still counted by cause.
TEST_F(GpuTimelineTest, IdleGapThresholdOverride) {
  {
    TimelineRun run(path_, 2);
    write_starved_rank(run, HostMemory::Pinned);
    run.finish("on");
  }
  RunDatabase db(path_);
  const Json gpu = first_rank(load_report(db, "", 31 * kMs))["gpu"];
  EXPECT_EQ(gpu["gap_threshold_ns"], 31 * kMs);
  EXPECT_EQ(gpu["gaps_above_threshold"], 0);
  EXPECT_EQ(gpu["gaps"], Json::array());
  EXPECT_NEAR(gpu["idle_by_cause"]["data_loading"].get<double>(), 0.30, 1e-9);
}

constexpr int kItems = 6;

// A loop that reads its loss each step: launch, 50 ms of kernels, Tensor.item() waits for them,
// then 5 ms of host work before the next launch. The steps run from one item() to the next (55 ms).
void write_item_loop(TimelineRun& run, bool gpu, TimelineRun::Kernel kernel = TimelineRun::kBf16Gemm) {
  for (int i = 0; i < kItems; ++i) {
    const int64_t base = kStart + i * 55 * kMs;
    run.launch(base + 5 * kMs);
    if (gpu) run.kernel(base + 5 * kMs, base + 55 * kMs, kernel);
    run.item(base + 6 * kMs, base + 55 * kMs);
  }
}

TEST_F(GpuTimelineTest, ItemThenHostWorkBubble) {
  {
    TimelineRun run(path_, 0);
    write_item_loop(run, true);
    run.finish("on");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const Json rank = first_rank(report);
  ASSERT_EQ(rank["hidden_syncs"].size(), 1u);
  const Json& item = rank["hidden_syncs"][0];
  EXPECT_EQ(item["operation"], "Tensor.item()");
  EXPECT_EQ(item["calls"], kItems);
  // Every call but the last, after which the GPU never ran again.
  EXPECT_EQ(item["bubble_ns"], (kItems - 1) * 5 * kMs);
  EXPECT_EQ(item["bubble_ns_per_call"], 5 * kMs);
  EXPECT_EQ(item["bubble_measured"], "gpu_timeline");

  const Json& gpu = rank["gpu"];
  EXPECT_EQ(gpu["covered_steps"], kItems - 1);
  EXPECT_NEAR(gpu["idle_share"].get<double>(), 5.0 / 55.0, 1e-9);
  EXPECT_NEAR(gpu["idle_by_cause"]["sync"].get<double>(), 5.0 / 55.0, 1e-9);
  EXPECT_EQ(gpu["idle_by_cause"]["data_loading"], 0.0);
  EXPECT_EQ(gpu["gap_threshold_ns"], 2'750'000);  // 5 % of 55 ms
  ASSERT_EQ(gpu["gaps"].size(), std::size_t(kItems - 1));
  EXPECT_EQ(gpu["gaps"][0]["cause"], "sync");
  EXPECT_EQ(gpu["gaps"][0]["start_ns"], 0);
  EXPECT_EQ(gpu["gaps"][0]["duration_ns"], 5 * kMs);
  EXPECT_EQ(gpu["gaps"][0]["site"], "/src/train.py:57 in train_step");
  EXPECT_TRUE(findings_of(report, "data_starvation").empty());

  const std::vector<Json> hidden = findings_of(report, "hidden_sync");
  ASSERT_EQ(hidden.size(), 1u);
  // The bubble (the step breakdown's part at its line), not the blocked time.
  EXPECT_EQ(hidden[0]["cost_ns"], (kItems - 1) * 5 * kMs);
  EXPECT_TRUE(hidden[0]["message"].get<std::string>().ends_with(
      "; the GPU sits idle 5.0 ms per step after it (9.1 % of the step, on the GPU timeline)"))
      << hidden[0]["message"];
  EXPECT_NE(render_text(report).find("      GPU idle after it: 5.0 ms per call, 25.0 ms in all (GPU timeline)\n"),
            std::string::npos);
}

// A graph captured again every step (torch.cuda.graph in the loop), 20 ms a step: the graph's
// replay busy 10 ms; __enter__'s sync returns, 1 ms later capture_begin's prologue kernel runs for
// 1 ms (the RNG's seed and offset, as on the real torch), then the capture and instantiation
// take 5 ms, and 3 ms pass to the next replay. While the host records the graph it queues
// nothing: those 5 ms of GPU idle are the capture's, at its line with the sync's 1 ms, not time
// the host took to launch work.
// A capture is paired by its stream, a begin that failed began none, and an end that failed ended
// none: here the thread's second capture, on another stream, is refused in the middle of its
// first, and then the first's end fails once.
TEST_F(GpuTimelineTest, TheGpuIdleWhileTheHostCapturesAGraphIsTheCaptures) {
  {
    TimelineRun run(path_, 0);
    for (int i = 0; i < 6; ++i) {
      const int64_t base = kStart + i * 20 * kMs;
      run.launch(base);
      run.kernel(base, base + 10 * kMs);
      run.graph_sync(base + 1 * kMs, base + 10 * kMs);
      run.kernel(base + 11 * kMs, base + 12 * kMs);
      run.capture(base + 12 * kMs, base + 17 * kMs);
      run.refused_capture(base + 13 * kMs, base + 14 * kMs, 0x5800);
      run.failed_end(base + 14 * kMs + kMs / 2, TimelineRun::kCaptureStream);
    }
    run.finish("on");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const Json gpu = first_rank(report)["gpu"];
  EXPECT_EQ(gpu["covered_steps"], 5);
  EXPECT_NEAR(gpu["idle_by_cause"]["sync"].get<double>(), 6.0 / 20.0, 1e-9);
  EXPECT_NEAR(gpu["idle_by_cause"]["host"].get<double>(), 3.0 / 20.0, 1e-9);
  // The first covered step's gaps, in order (the ten longest of the run are listed: the sync's
  // 1 ms, counted above, is not among them).
  std::vector<Json> gaps;
  for (const Json& gap : gpu["gaps"])
    if (gap["step"] == 0) gaps.push_back(gap);
  std::sort(gaps.begin(), gaps.end(), [](const Json& a, const Json& b) { return a["start_ns"] < b["start_ns"]; });
  ASSERT_EQ(gaps.size(), 2u) << gpu["gaps"].dump();
  const std::string line = "/src/train.py:80 in train_step";
  EXPECT_EQ(gaps[0]["cause"], "sync");
  EXPECT_EQ(gaps[0]["start_ns"], 2 * kMs);
  EXPECT_EQ(gaps[0]["duration_ns"], 5 * kMs);
  EXPECT_EQ(gaps[0]["site"], line);
  EXPECT_EQ(gaps[1]["cause"], "host");
  EXPECT_EQ(gaps[1]["start_ns"], 7 * kMs);
  EXPECT_EQ(gaps[1]["duration_ns"], 3 * kMs);
  // What fixing that line buys: the sync's bubble and the capture, 6 ms of each 20 ms step.
  const Json parts = first_rank(report)["step_breakdown"]["parts"];
  bool found = false;
  for (const Json& part : parts)
    if (part["part"] == "sync" && part["site"] == line) {
      found = true;
      EXPECT_EQ(part["ns_per_step"], 6 * kMs);
    }
  EXPECT_TRUE(found) << parts.dump();
}

// Matmuls in FP32 on the CUDA cores: the AMP finding, its cost their GPU time.
TEST_F(GpuTimelineTest, Fp32GemmsAreFound) {
  {
    TimelineRun run(path_, 0);
    write_item_loop(run, true, TimelineRun::kFp32Gemm);
    run.finish("on");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  EXPECT_EQ(first_rank(report)["gpu"]["fp32_gemm_share"], 1.0);
  const std::vector<Json> amp = findings_of(report, "fp32_gemm");
  ASSERT_EQ(amp.size(), 1u);
  EXPECT_EQ(amp[0]["rank"], 0);
  EXPECT_EQ(amp[0]["cost_ns"], kItems * 50 * kMs);
  EXPECT_EQ(amp[0]["message"], "rank 0: 100.0 % of GPU time in FP32 GEMMs (ampere_sgemm_128x64_tn the longest)");
  EXPECT_TRUE(amp[0]["advice"].get<std::string>().starts_with("use autocast with bf16")) << amp[0]["advice"];
}

// No CUPTI: the bubble is the host's time from each return to its thread's next launch.
TEST_F(GpuTimelineTest, WithoutCuptiTheBubbleIsHostSide) {
  {
    TimelineRun run(path_, 0);
    write_item_loop(run, false);
    run.finish("unavailable");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const Json rank = first_rank(report);
  ASSERT_EQ(rank["hidden_syncs"].size(), 1u);
  EXPECT_EQ(rank["hidden_syncs"][0]["bubble_ns"], (kItems - 1) * 5 * kMs);
  EXPECT_EQ(rank["hidden_syncs"][0]["bubble_ns_per_call"], 5 * kMs);
  EXPECT_EQ(rank["hidden_syncs"][0]["bubble_measured"], "host_launch");
  const Json& gpu = rank["gpu"];
  EXPECT_EQ(gpu["timeline"], "unavailable");
  EXPECT_EQ(gpu["covered_steps"], 0);
  EXPECT_TRUE(gpu["busy_share"].is_null());
  EXPECT_TRUE(gpu["idle_by_cause"].is_null());
  EXPECT_EQ(gpu["why_none"], "CUPTI could not be loaded (no libcupti.so, or one without what trainshim needs)");

  const std::vector<Json> info = findings_of(report, "gpu_timeline");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0]["cost_ns"], 0);
  EXPECT_TRUE(info[0]["advice"].get<std::string>().find("TRAINSHIM_CUPTI") != std::string::npos) << info[0];
  const std::string text = render_text(report);
  EXPECT_NE(text.find("      GPU idle after it: 5.0 ms per call, 25.0 ms in all (host side, until its thread's next "
                      "kernel launch)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  GPU timeline: none: CUPTI could not be loaded"), std::string::npos) << text;
}

// Another CUPTI client held it: said once, with what to do, and no figure.
TEST_F(GpuTimelineTest, CuptiTakenIsSaidWithoutFigures) {
  {
    TimelineRun run(path_, 1);
    write_item_loop(run, false);
    run.finish("taken");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const Json gpu = first_rank(report)["gpu"];
  EXPECT_EQ(gpu["timeline"], "taken");
  EXPECT_EQ(gpu["covered_steps"], 0);
  EXPECT_TRUE(gpu["busy_share"].is_null());
  EXPECT_TRUE(gpu["idle_share"].is_null());
  EXPECT_EQ(gpu["gaps"], Json::array());
  const std::vector<Json> info = findings_of(report, "gpu_timeline");
  ASSERT_EQ(info.size(), 1u);
  EXPECT_EQ(info[0]["rank"], 1);
  EXPECT_EQ(info[0]["message"],
            "rank 1: no GPU timeline: another CUPTI client (torch.profiler, Nsight Systems, Nsight Compute) held "
            "CUPTI first: trainshim left it to them; without it the report has no GPU busy and idle figures, and "
            "sync bubbles are measured on the host side only (up to the next kernel launch)");
  EXPECT_EQ(info[0]["advice"],
            "run without torch.profiler or Nsight (or profile with them on their own) to get the GPU timeline; the "
            "rest of the report does not depend on it");
  EXPECT_TRUE(findings_of(report, "data_starvation").empty());
}

// A balanced, well-fed rank: kernels back to back (10 µs apart), each batch uploaded on a side
// stream while the GPU computes.
// Step k from `t`: its all-reduce, the NCCL kernel (5 ms), then four kernels to t + 100 ms with
// 10 us between them.
void write_busy_step(TimelineRun& run, int64_t t, int k) {
  run.all_reduce(t, uint32_t(k + 1));
  run.kernel(t, t + 5 * kMs, TimelineRun::kNccl);
  for (int j = 0; j < 4; ++j) run.kernel(t + 5 * kMs + j * 23'750'000 + 10'000, t + 5 * kMs + (j + 1) * 23'750'000);
}

TEST_F(GpuTimelineTest, WellFedRankHasNoGapAndNoFinding) {
  {
    TimelineRun run(path_, 3);
    for (int k = 0; k < kAllReduces; ++k) {
      const int64_t t = kStart + k * 100 * kMs;
      write_busy_step(run, t, k);
      run.upload(t + 20 * kMs, t + 20 * kMs + 20'000, HostMemory::Pinned);
      run.gpu_upload(t + 20 * kMs, t + 21 * kMs, HostMemory::Pinned);
    }
    run.finish("on");
  }
  RunDatabase db(path_);
  const Report report = load_report(db);
  const Json gpu = first_rank(report)["gpu"];
  EXPECT_EQ(gpu["covered_steps"], 5);
  EXPECT_NEAR(gpu["idle_share"].get<double>(), 40'000.0 / 100e6, 1e-12);  // four gaps of 10 µs a step
  EXPECT_NEAR(gpu["idle_by_cause"]["host"].get<double>(), 40'000.0 / 100e6, 1e-12);
  EXPECT_EQ(gpu["gaps_above_threshold"], 0);
  EXPECT_EQ(gpu["gaps"], Json::array());
  EXPECT_TRUE(findings_of(report, "data_starvation").empty());
  EXPECT_TRUE(findings_of(report, "gpu_timeline").empty());
  EXPECT_NE(render_text(report).find("  no idle gap of 5.0 ms or more\n"), std::string::npos);
}

// A well-fed rank whose host stalls once for 300 ms, three steps' worth, the GPU idle throughout;
// `edges`: the shim recorded the timeline's window around the whole run (as an always-on timeline
// does, or a window of the duty cycle that holds it).
void write_stalled_rank(TimelineRun& run, bool edges) {
  int64_t t = kStart;
  if (edges) run.timeline_edge(t - kMs, true);
  for (int k = 0; k < kAllReduces; ++k) {
    write_busy_step(run, t, k);
    t += (k == 2 ? 400 : 100) * kMs;
  }
  if (edges) run.timeline_edge(t, false);
}

// Inside the window the shim recorded, a GPU idle for longer than two steps is idle: the step is
// covered and its gap counted (a timeline without edges, from an older trainshim, takes such a
// silence for the window's end).
TEST_F(GpuTimelineTest, AStallInsideTheRecordedWindowIsIdleTimeNotTimeOffTheTimeline) {
  {
    TimelineRun run(path_, 3);
    write_stalled_rank(run, true);
    run.finish("on");
  }
  const Json gpu = gpu_of_database();
  EXPECT_EQ(gpu["covered_steps"], 5);
  EXPECT_EQ(gpu["idle_ns_per_step"], (5 * 40'000 + 300 * kMs) / 5);
  EXPECT_EQ(gpu["gaps_above_threshold"], 1);
  ASSERT_EQ(gpu["gaps"].size(), 1u);
  EXPECT_EQ(gpu["gaps"][0]["step"], 2);
  EXPECT_EQ(gpu["gaps"][0]["start_ns"], 100 * kMs);
  EXPECT_EQ(gpu["gaps"][0]["duration_ns"], 300 * kMs);
  EXPECT_EQ(gpu["gaps"][0]["cause"], "host");
  std::filesystem::remove(path_);
  {
    TimelineRun run(path_, 3);
    write_stalled_rank(run, false);
    run.finish("on");
  }
  const Json inferred = gpu_of_database();
  EXPECT_EQ(inferred["covered_steps"], 4);
  EXPECT_EQ(inferred["gaps_above_threshold"], 0);
}

// 12 steps of 100 ms (an all-reduce, then 85 ms of compute) under a duty-cycled timeline: recorded
// only inside its windows, steps 0-2 and 7-11; off inside step 3, on again inside step 6 (its
// kernels ran before the window, unrecorded).
void write_duty_cycled_rank(TimelineRun& run) {
  run.timeline_edge(kStart - kMs, true);
  for (int k = 0; k < 12; ++k) {
    const int64_t t = kStart + k * 100 * kMs;
    run.all_reduce(t, uint32_t(k + 1));
    if (k >= 3 && k < 7) continue;
    run.kernel(t, t + 5 * kMs, TimelineRun::kNccl);
    run.kernel(t + 5 * kMs, t + 90 * kMs);
  }
  run.timeline_edge(kStart + 350 * kMs, false);
  run.timeline_edge(kStart + 650 * kMs, true);
  run.finish("on");
}

// A window is the span from an on edge to the next off edge; a window after the first starts at its
// first activity (work launched before it may have run unrecorded); one still open at the end ends
// with its activity.
TEST_F(GpuTimelineTest, TheDutyCyclesWindowsBoundTheCoveredSteps) {
  {
    TimelineRun run(path_, 3);
    write_duty_cycled_rank(run);
  }
  const Json gpu = gpu_of_database();
  // Steps 0-2 in the first window; 7-10 in the second, which starts at step 7's first kernel and
  // ends with step 11's last (the last step has no end).
  EXPECT_EQ(gpu["covered_steps"], 7);
  EXPECT_EQ(gpu["idle_ns_per_step"], 10 * kMs);
}

// The Kineto trace of a duty-cycled run: its two stretches of covered steps (0-2 and 7-10) follow
// each other, the second moved 400 ms earlier, so that HTA, which spans a file from its first record
// to its last, sees 700 ms of covered steps and no idle time the timeline did not record.
TEST_F(GpuTimelineTest, KinetoTraceOfADutyCycledRunLeavesOutTheTimeNotRecorded) {
  {
    TimelineRun run(path_, 3);
    write_duty_cycled_rank(run);
  }
  RunDatabase db(path_);
  std::vector<Json> traces;
  for_each_kineto_trace(db, "", [&](const std::string&, const Json& trace) { traces.push_back(trace); });
  ASSERT_EQ(traces.size(), 1u);
  const Json& trace = traces[0];
  EXPECT_EQ(trace["trainshim"]["covered_ns"], 700 * kMs);
  EXPECT_EQ(trace["trainshim"]["not_recorded_ns"], 400 * kMs);
  const Json& events = trace["traceEvents"];
  ASSERT_EQ(events.size(), 14u) << "steps 0-2 and 7-10, two kernels each";
  EXPECT_EQ(events[0]["ts"], 1'000'000.0);
  EXPECT_EQ(events[6]["ts"], 1'300'000.0) << "step 7's NCCL kernel, where step 2 ended";
  EXPECT_EQ(events[6]["name"], "ncclDevKernel_AllReduce_Sum_f32_RING_LL");
  EXPECT_EQ(events[13]["ts"].get<double>() + events[13]["dur"].get<double>(), 1'690'000.0)
      << "step 10's last kernel ends 700 ms after the first began, less its 10 ms of idle";
}

// --- Where steps start -----------------------------------------------------------------------------

TEST(StepStarts, AtTheReturnOfEachCallOfTheMarkingSite) {
  StepInput in;
  const StepInput::Sync setup = in.intern("/src/setup.py:3", {"init"});
  const StepInput::Sync item = in.intern("/src/train.py:57", {"train_step"});
  in.syncs.push_back({setup.site, setup.functions, 50});
  for (int64_t i = 0; i < 4; ++i) in.syncs.push_back({item.site, item.functions, 100 + 10 * i});
  in.span_ns = 1000;
  EXPECT_EQ(find_steps(in, "").starts_ns, (std::vector<int64_t>{100, 110, 120, 130}));
  EXPECT_EQ(find_steps(in, "train.py:57").starts_ns, (std::vector<int64_t>{100, 110, 120, 130}));
  EXPECT_EQ(find_steps(in, "setup.py:3").starts_ns, (std::vector<int64_t>{50}));
}

TEST(StepStarts, AtEachPeriodsFirstCollective) {
  StepInput in;
  in.collectives = {{1, 8, 5}, {2, 16, 10}, {3, 4, 20}, {2, 16, 30}, {3, 4, 40}, {2, 16, 50}, {3, 4, 60}};
  in.span_ns = 100;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.starts_ns, (std::vector<int64_t>{10, 30, 50}));
}

TEST(StepStarts, NoneWithoutSteps) {
  StepInput in;
  in.span_ns = 100;
  EXPECT_EQ(find_steps(in, "").starts_ns, std::vector<int64_t>{});
}

}  // namespace
}  // namespace trainshim::cli
