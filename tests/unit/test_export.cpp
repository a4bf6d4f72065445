// `trainshim export --format chrome`: a run database written with the collector's Database,
// exported as a Chrome trace and read back with nlohmann::json.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <streambuf>
#include <string>
#include <vector>

#include "commands/commands.hpp"
#include "database.hpp"
#include "diagnose/load_report.hpp"
#include "gpu_rows.hpp"
#include "render/export.hpp"
#include "render/report_json.hpp"
#include "run_fixtures.hpp"
#include "store/run_database.hpp"
#include "temp_dir.hpp"

namespace trainshim::cli {
namespace {

namespace fs = std::filesystem;
using collector::Database;
using test::header_for;
using Json = nlohmann::json;

constexpr uint64_t kComm = 0xABCDEF0123456789ULL;  // above 2^63: stored as a negative integer
constexpr uint64_t kOtherComm = 0x42;
constexpr int64_t kOrigin = 1'000'000;       // the earliest begin_ns of the scenario
constexpr int64_t kPid0 = 100, kPid1 = 101;  // the ranks' pids: their processes' pids in the trace

EventRecord record(Api api, uint32_t tid) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(api);
  r.tid = tid;
  return r;
}

EventRecord copy(Api api, uint32_t tid, uint64_t bytes, Direction d, HostMemory m) {
  EventRecord r = record(api, tid);
  r.bytes = bytes;
  r.direction = static_cast<uint8_t>(d);
  r.host_memory = static_cast<uint8_t>(m);
  r.stream = 0x7f00;
  return r;
}

// A collective call and, as the shim writes it once the GPU finished, its timing row.
void collective(test::Records& records, int64_t process, Api api, uint32_t tid, uint64_t comm, uint32_t sequence,
                uint32_t rank_in_comm, uint64_t begin, uint64_t end, uint64_t gpu_ns) {
  EventRecord r = record(api, tid);
  r.object = comm;
  r.sequence = sequence;
  r.comm_size = 2;
  r.rank_in_comm = rank_in_comm;
  r.bytes = 1 << 20;
  r.detail = 7 << 8 | 1;
  records.add(process, r, begin, end);
  r.api = static_cast<uint16_t>(Api::ncclGpuTiming);
  r.detail = gpu_ns;
  records.add(process, r, begin, end);
}

class ExportTest : public test::TempDirTest {
 protected:
  // Rank 1 is added first: the trace orders processes by rank, pid is the process row id.
  void write_two_rank_run() {
    Database db(path_, "unitjob");
    r1_ = db.add_process("seg-101", *header_for(1, 101, "nodeB"));
    r0_ = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    test::Records records(db);

    // Rank 0: a pageable H2D copy, a Tensor.item() with its stacks, two all-reduces (the first
    // longer on the GPU than rank 1's: rank 0 waited), a broadcast only rank 0 timed.
    records.add(r0_, copy(Api::cudaMemcpyAsync, 100, 4096, Direction::HostToDevice, HostMemory::Pageable), 1'000'000,
                1'003'500);
    EventRecord item = record(Api::cudaStreamSynchronize, 100);
    item.native_stack = 7;
    item.python_stack = 3;
    records.add(r0_, item, 1'010'250, 1'012'750);
    db.add_native_frame(r0_, 7, 0,
                        {0x1000, "/x/libtorch_cuda.so", "at::native::_local_scalar_dense(at::Tensor const&)", "", 0});
    db.add_native_frame(r0_, 7, 1, {0x2000, "/x/libtorch_python.so", "THPVariable_item", "", 0});
    db.add_python_frame(r0_, 3, 0, "train.py", "train_step", 57, kSource);
    db.add_python_frame(r0_, 3, 1, "train.py", "main", 90, "train_step(model, batch)");
    collective(records, r0_, Api::ncclAllReduce, 100, kComm, 1, 0, 1'020'000, 1'021'000, 5000);
    collective(records, r0_, Api::ncclAllReduce, 100, kComm, 2, 0, 1'022'000, 1'023'000, 800);
    collective(records, r0_, Api::ncclBroadcast, 100, kOtherComm, 1, 0, 1'030'000, 1'030'100, 700);
    db.update_process(r0_, {.events = 9,
                            .dropped_ring_full = 5,
                            .dropped_not_ready = 1,
                            .lost_unpublished = 0,
                            .malformed = 2,
                            .ended = true});

    // Rank 1: the two all-reduces, and a D2H copy into pageable memory (a sync) on another thread.
    collective(records, r1_, Api::ncclAllReduce, 101, kComm, 1, 1, 2'000'000, 2'000'500, 1000);
    collective(records, r1_, Api::ncclAllReduce, 101, kComm, 2, 1, 2'010'000, 2'010'500, 3000);
    records.add(r1_, copy(Api::cudaMemcpy, 102, 300, Direction::DeviceToHost, HostMemory::Pageable), 2'020'000,
                2'022'000);
    // Rank 1's threads as the census named them (rank 0's were not named).
    db.set_fact(r1_, "thread.101", "python3");
    db.set_fact(r1_, "thread.102", "pt_data_pin");
    db.set_fact(r1_, "thread.1x", "not a thread id");
    db.update_process(r1_, {.events = 5,
                            .dropped_ring_full = 6200,
                            .dropped_not_ready = 0,
                            .lost_unpublished = 0,
                            .malformed = 0,
                            .ended = false});
    records.store();
    db.commit();
  }

  Json export_json() {
    RunDatabase db(path_);
    std::ostringstream out;
    export_chrome_trace(db, out);
    text_ = out.str();
    return Json::parse(text_);  // throws on invalid JSON
  }

  static constexpr const char* kSource = "loss_val = loss.item()  # \"quoted\" back\\slash\ttab";
  const std::string path_ = dir_ + "/trainshim-unitjob.db";
  std::string text_;
  int64_t r0_ = 0, r1_ = 0;
};

std::vector<Json> with_phase(const Json& trace, const std::string& phase) {
  std::vector<Json> out;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == phase) out.push_back(e);
  return out;
}

// A slice on a host thread, or with `gpu` on a GPU collective track.
const Json* find_slice(const Json& trace, int64_t pid, const std::string& name, double ts, bool gpu = false) {
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["pid"] == pid && e["name"] == name && e["ts"].get<double>() == ts &&
        (e["tid"].get<int64_t>() >= kGpuTrackBase) == gpu)
      return &e;
  return nullptr;
}

std::string metadata(const Json& trace, const std::string& name, int64_t pid, int64_t tid = 0) {
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "M" && e["name"] == name && e["pid"] == pid && e["tid"] == tid) return e["args"].dump();
  return "";
}

TEST_F(ExportTest, DocumentProcessesAndThreads) {
  write_two_rank_run();
  const Json trace = export_json();
  ASSERT_TRUE(trace.is_object());
  EXPECT_EQ(trace["displayTimeUnit"], "ns");
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["otherData"]["job"], "unitjob");
  EXPECT_FALSE(trace["otherData"].contains("gpu_idle"));  // no GPU timeline recorded

  // Viewers show the pid and the tid beside the names: the names do not repeat them.
  EXPECT_EQ(metadata(trace, "process_name", kPid0), R"j({"name":"rank 0 (nodeA)"})j");
  EXPECT_EQ(metadata(trace, "process_name", kPid1), R"j({"name":"rank 1 (nodeB)"})j");
  EXPECT_EQ(metadata(trace, "process_sort_index", kPid0), R"({"sort_index":0})");
  EXPECT_EQ(metadata(trace, "process_sort_index", kPid1), R"({"sort_index":1})");
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, 100), R"j({"name":"main thread"})j");  // its name not recorded
  EXPECT_EQ(metadata(trace, "thread_name", kPid1, 101), R"j({"name":"python3"})j");
  EXPECT_EQ(metadata(trace, "thread_name", kPid1, 102), R"j({"name":"pt_data_pin"})j");
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kGpuTrackBase), R"j({"name":"GPU collectives abcdef0123456789"})j");
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kGpuTrackBase + 1),
            R"j({"name":"GPU collectives 0000000000000042"})j");
  EXPECT_EQ(metadata(trace, "thread_name", kPid1, kGpuTrackBase), R"j({"name":"GPU collectives abcdef0123456789"})j");

  // Every call is one slice on its thread, the sync's two Python frames around it; timing rows are
  // GPU slices only, two of them with a wait.
  int host = 0, frames = 0, gpu = 0, waits = 0;
  for (const auto& e : with_phase(trace, "X"))
    (e["tid"].get<int64_t>() >= kGpuTrackBase ? e["cat"] == "gpu_collective" ? gpu : waits
     : e["cat"] == "python"                   ? frames
                                              : host) += 1;
  EXPECT_EQ(host, 8);
  EXPECT_EQ(frames, 2);
  EXPECT_EQ(gpu, 5);
  EXPECT_EQ(waits, 2);
}

// Each process is shown under its own pid; two nodes' processes that share one stay apart, each
// under kSharedPidBase plus its row id, with its own pid still in its name.
TEST_F(ExportTest, ProcessesOfTwoNodesSharingAPidStayApart) {
  int64_t p[2] = {};
  {
    Database db(path_, "unitjob");
    p[0] = db.add_process("seg-a", *header_for(0, 100, "nodeA"));
    p[1] = db.add_process("seg-b", *header_for(1, 100, "nodeB"));
    test::Records records(db);
    for (int k = 0; k < 2; ++k)
      records.add(p[k], copy(Api::cudaMemcpyAsync, 100, 64, Direction::HostToDevice, HostMemory::Pinned),
                  1'000'000 + uint64_t(k) * 1000, 1'000'100 + uint64_t(k) * 1000);
    records.store();
    db.commit();
  }
  const Json trace = export_json();
  EXPECT_EQ(metadata(trace, "process_name", kSharedPidBase + p[0]), R"j({"name":"rank 0 (nodeA, pid 100)"})j");
  EXPECT_EQ(metadata(trace, "process_name", kSharedPidBase + p[1]), R"j({"name":"rank 1 (nodeB, pid 100)"})j");
  EXPECT_EQ(metadata(trace, "process_name", 100), "");
  EXPECT_NE(find_slice(trace, kSharedPidBase + p[0], "memcpy h2d pinned", 0.0), nullptr) << text_;
  EXPECT_NE(find_slice(trace, kSharedPidBase + p[1], "memcpy h2d pinned", 1.0), nullptr) << text_;
}

TEST_F(ExportTest, SyncsNamedByOperationWithTheirSite) {
  write_two_rank_run();
  const Json trace = export_json();

  const Json* item = find_slice(trace, kPid0, "Tensor.item()", (1'010'250 - kOrigin) / 1000.0);
  ASSERT_NE(item, nullptr) << text_;
  EXPECT_EQ((*item)["tid"], 100);
  EXPECT_EQ((*item)["ts"].get<double>(), 10.25);
  EXPECT_EQ((*item)["dur"].get<double>(), 2.5);
  EXPECT_EQ((*item)["cat"], "sync");
  const Json& args = (*item)["args"];
  EXPECT_EQ(args["api"], "cudaStreamSynchronize");
  EXPECT_EQ(args["python_site"], "train.py:57 in train_step");
  EXPECT_EQ(args["source"], kSource);  // quotes, backslash and tab escaped and read back
  EXPECT_EQ(args["kind"], "hidden");
  EXPECT_EQ(args["bytes"], 0);
  EXPECT_EQ(args["direction"], "none");
  // Its Python frames enclose it, outermost first, with its times: written before it, in that order.
  std::vector<Json> thread;
  for (const Json& x : with_phase(trace, "X"))
    if (x["pid"] == kPid0 && x["tid"] == 100 && x["ts"].get<double>() == 10.25) thread.push_back(x);
  ASSERT_EQ(thread.size(), 3u) << text_;
  EXPECT_EQ(thread[0]["name"], "main");
  EXPECT_EQ(thread[0]["args"], (Json{{"file", "train.py"}, {"line", 90}}));
  EXPECT_EQ(thread[1]["name"], "train_step");
  EXPECT_EQ(thread[1]["args"], (Json{{"file", "train.py"}, {"line", 57}}));
  EXPECT_EQ(thread[2]["name"], "Tensor.item()");
  for (const Json& frame : {thread[0], thread[1]}) {
    EXPECT_EQ(frame["cat"], "python");
    EXPECT_EQ(frame["dur"].get<double>(), 2.5);
  }

  const Json* h2d = find_slice(trace, kPid0, "memcpy h2d pageable", 0.0);
  ASSERT_NE(h2d, nullptr) << text_;
  EXPECT_EQ((*h2d)["dur"].get<double>(), 3.5);
  EXPECT_EQ((*h2d)["args"]["bytes"], 4096);
  EXPECT_EQ((*h2d)["args"]["host_memory"], "pageable");

  // A D2H copy into pageable memory is a sync: named by its shape, with no stack to name a site.
  const Json* d2h = find_slice(trace, kPid1, "blocking D2H copy into pageable memory", 1020.0);
  ASSERT_NE(d2h, nullptr) << text_;
  EXPECT_EQ((*d2h)["tid"], 102);
  EXPECT_EQ((*d2h)["dur"].get<double>(), 2.0);
  EXPECT_EQ((*d2h)["args"]["kind"], "hidden");
  EXPECT_EQ((*d2h)["args"]["direction"], "d2h");
  EXPECT_EQ((*d2h)["args"]["bytes"], 300);
  EXPECT_FALSE((*d2h)["args"].contains("python_site"));

  const Json* reduce = find_slice(trace, kPid0, "ncclAllReduce", 20.0);
  ASSERT_NE(reduce, nullptr) << text_;
  EXPECT_EQ((*reduce)["tid"], 100);
  EXPECT_EQ((*reduce)["dur"].get<double>(), 1.0);
  EXPECT_EQ((*reduce)["args"]["communicator"], "abcdef0123456789");
  EXPECT_EQ((*reduce)["args"]["bytes"], 1 << 20);
  EXPECT_FALSE((*reduce)["args"].contains("sequence"));  // a per-call number: in the flows only
}

// The GPU slices' arguments are the same for every call of one communicator and size (viewers that
// group by name and arguments group them); each rank's wait is a nested slice, each call's number
// is in its flows.
TEST_F(ExportTest, GpuCollectivesWithWaitsAndFlows) {
  write_two_rank_run();
  const Json trace = export_json();
  struct Expected {
    int64_t pid, tid;
    double ts, dur;
    double wait_us;
    const char* name;
    const char* comm;
  };
  // Rank 0's second all-reduce starts on the GPU when its first ends (25 µs), not at its call (22 µs).
  const Expected expected[] = {
      {kPid0, kGpuTrackBase, 20.0, 5.0, 4.0, "ncclAllReduce", "abcdef0123456789"},
      {kPid0, kGpuTrackBase, 25.0, 0.8, 0.0, "ncclAllReduce", "abcdef0123456789"},
      {kPid0, kGpuTrackBase + 1, 30.0, 0.7, 0.0, "ncclBroadcast", "0000000000000042"},
      {kPid1, kGpuTrackBase, 1000.0, 1.0, 0.0, "ncclAllReduce", "abcdef0123456789"},
      {kPid1, kGpuTrackBase, 1010.0, 3.0, 2.2, "ncclAllReduce", "abcdef0123456789"},
  };
  std::vector<Json> waits;
  for (const Json& x : with_phase(trace, "X"))
    if (x["cat"] == "gpu_collective_wait") waits.push_back(x);
  std::size_t waited = 0;
  for (const auto& x : expected) {
    const Json* s = find_slice(trace, x.pid, x.name, x.ts, true);
    ASSERT_NE(s, nullptr) << x.pid << " " << x.ts << "\n" << text_;
    EXPECT_EQ((*s)["tid"], x.tid);
    EXPECT_EQ((*s)["dur"].get<double>(), x.dur);
    EXPECT_EQ((*s)["args"], (Json{{"communicator", x.comm}, {"bytes", 1 << 20}})) << x.pid << " " << x.ts;
    if (x.wait_us == 0) continue;
    ++waited;
    const Json* w = find_slice(trace, x.pid, "waiting for the other ranks", x.ts, true);
    ASSERT_NE(w, nullptr) << x.pid << " " << x.ts << "\n" << text_;
    EXPECT_EQ((*w)["tid"], x.tid);
    EXPECT_DOUBLE_EQ((*w)["dur"].get<double>(), x.wait_us);
    EXPECT_FALSE(w->contains("args"));
  }
  EXPECT_EQ(waits.size(), waited);

  auto flows = [&](const char* phase, const char* cat) {
    std::vector<Json> out;
    for (const Json& e : with_phase(trace, phase))
      if (e["cat"] == cat) out.push_back(e);
    return out;
  };
  // One flow per all-reduce: started on rank 0, finished on rank 1, inside the GPU slices, named
  // by the call's number. The broadcast, timed by one rank only, has none.
  const auto starts = flows("s", "collective"), finishes = flows("f", "collective");
  EXPECT_TRUE(with_phase(trace, "t").empty());
  ASSERT_EQ(starts.size(), 2u) << text_;
  ASSERT_EQ(finishes.size(), 2u) << text_;
  std::set<int64_t> ids;
  for (std::size_t i = 0; i < 2; ++i) {
    const Json& s = starts[i];
    EXPECT_EQ(s["pid"], kPid0);
    EXPECT_EQ(s["tid"], kGpuTrackBase);
    EXPECT_EQ(s["name"], fmt::format("ncclAllReduce #{}", i + 1));
    EXPECT_EQ(s["bp"], "e");
    int matches = 0;
    for (const Json& f : finishes)
      if (f["id"] == s["id"]) {
        ++matches;
        EXPECT_EQ(f["pid"], kPid1);
        EXPECT_EQ(f["name"], s["name"]);
        EXPECT_EQ(f["bp"], "e");
      }
    EXPECT_EQ(matches, 1);
    ids.insert(s["id"].get<int64_t>());
  }
  EXPECT_EQ(ids.size(), 2u);

  // Each timed call's host slice starts a flow that ends in the middle of its GPU slice, never
  // before it starts (a viewer reads a flow's points in time order): three on rank 0, two on rank 1,
  // each id once in the trace.
  const auto host_starts = flows("s", "host_to_gpu"), host_ends = flows("f", "host_to_gpu");
  ASSERT_EQ(host_starts.size(), 5u) << text_;
  ASSERT_EQ(host_ends.size(), 5u) << text_;
  const std::pair<int64_t, double> gpu_middles[] = {
      {kPid0, 22.5}, {kPid0, 25.4}, {kPid0, 30.35}, {kPid1, 1000.5}, {kPid1, 1011.5}};
  std::set<int64_t> host_ids;
  for (const auto& middle : gpu_middles) {
    const int64_t pid = middle.first;
    const double ts = middle.second;
    const auto end = std::find_if(host_ends.begin(), host_ends.end(),
                                  [&](const Json& f) { return f["pid"] == pid && f["ts"].get<double>() == ts; });
    ASSERT_NE(end, host_ends.end()) << pid << " " << ts;
    EXPECT_GE((*end)["tid"].get<int64_t>(), kGpuTrackBase);
    const auto start =
        std::find_if(host_starts.begin(), host_starts.end(), [&](const Json& s) { return s["id"] == (*end)["id"]; });
    ASSERT_NE(start, host_starts.end()) << *end;
    EXPECT_EQ((*start)["pid"], pid);
    EXPECT_LT((*start)["tid"].get<int64_t>(), kGpuTrackBase);
    EXPECT_EQ((*start)["name"], (*end)["name"]);
    EXPECT_LE((*start)["ts"].get<double>(), ts);
    host_ids.insert((*end)["id"].get<int64_t>());
  }
  EXPECT_EQ(host_ids.size(), 5u);

  // Each flow point lies inside a slice of its own track.
  for (const auto* list : {&starts, &finishes, &host_starts, &host_ends})
    for (const Json& p : *list) {
      bool inside = false;
      for (const Json& x : with_phase(trace, "X"))
        if (x["pid"] == p["pid"] && x["tid"] == p["tid"] && x["ts"].get<double>() <= p["ts"].get<double>() &&
            p["ts"].get<double>() <= x["ts"].get<double>() + x["dur"].get<double>())
          inside = true;
      EXPECT_TRUE(inside) << p;
    }
}

// A Python stack an autograd engine thread borrowed from the thread blocked in backward is that
// thread's: its frames are not nested on the engine thread, though they still name the sync.
TEST_F(ExportTest, BorrowedPythonStackIsNotNestedOnTheEngineThread) {
  {
    Database db(path_, "unitjob");
    const int64_t p = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    db.add_python_stack(p, 1, true, 0);
    db.add_python_frame(p, 1, 0, "train.py", "train_step", 57, "loss.backward()");
    test::Records records(db);
    EventRecord r = record(Api::cudaStreamSynchronize, 105);
    r.python_stack = 1;
    records.add(p, r, 1'000'000, 1'500'000);
    records.store();
    db.commit();
  }
  const Json trace = export_json();
  const std::vector<Json> slices = with_phase(trace, "X");
  ASSERT_EQ(slices.size(), 1u) << text_;
  EXPECT_EQ(slices[0]["tid"], 105);
  EXPECT_EQ(slices[0]["args"]["python_site"], "train.py:57 in train_step");
}

// A flow across ranks runs from the earliest rank's point to the latest's, whatever their order in
// the trace: a viewer (Perfetto) reads a flow's points in time order and drops a flow that ends
// before it starts.
TEST_F(ExportTest, CrossRankFlowRunsInTimeOrder) {
  {
    Database db(path_, "unitjob");
    const int64_t p0 = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    const int64_t p1 = db.add_process("seg-101", *header_for(1, 101, "nodeB"));
    const int64_t p2 = db.add_process("seg-102", *header_for(2, 102, "nodeC"));
    test::Records records(db);
    // Rank 1 reaches the all-reduce first, rank 2 next, rank 0 last.
    collective(records, p1, Api::ncclAllReduce, 101, kComm, 1, 1, 1'000'000, 1'000'100, 6000);
    collective(records, p2, Api::ncclAllReduce, 102, kComm, 1, 2, 1'002'000, 1'002'100, 4000);
    collective(records, p0, Api::ncclAllReduce, 100, kComm, 1, 0, 1'005'000, 1'005'100, 1000);
    records.store();
    db.commit();
  }
  const Json trace = export_json();
  std::vector<std::pair<std::string, Json>> points;
  for (const Json& e : trace["traceEvents"])
    if (e["ph"] == "s" || e["ph"] == "t" || e["ph"] == "f")
      if (e["cat"] == "collective") points.emplace_back(e["ph"], e);
  ASSERT_EQ(points.size(), 3u) << text_;
  std::map<std::string, Json> by_phase;
  for (const auto& [phase, e] : points) by_phase[phase] = e;
  EXPECT_EQ(by_phase["s"]["pid"], kPid1);
  // The middles of the GPU slices: at 0 µs for 6 µs, at 2 µs for 4 µs, at 5 µs for 1 µs.
  EXPECT_EQ(by_phase["s"]["ts"].get<double>(), 3.0);
  EXPECT_EQ(by_phase["t"]["pid"], 102);
  EXPECT_EQ(by_phase["t"]["ts"].get<double>(), 4.0);
  EXPECT_EQ(by_phase["f"]["pid"], kPid0);
  EXPECT_EQ(by_phase["f"]["ts"].get<double>(), 5.5);
}

// Two nodes' databases, node B's clock 3 hours and 50 ms ahead of node A's (its host booted
// earlier, and its wall clock is off): the all-reduces end at the same moment on both ranks, which
// puts B's clock on A's; one where rank 1's GPU was still busy when it called (its end drawn early)
// does not move the median. A third node that shares no collective is put on the wall clock.
TEST_F(ExportTest, ClocksOfTwoNodesAlignedFromTheCollectivesTheyShare) {
  constexpr int64_t kAhead = 3 * 3600 * 1'000'000'000LL + 50'000'000;
  const std::string node_a = dir_ + "/node_a.db", node_b = dir_ + "/node_b.db", node_c = dir_ + "/node_c.db";
  {
    Database a(node_a, "unitjob"), b(node_b, "unitjob"), c(node_c, "unitjob");
    const int64_t p0 = a.add_process("seg-100", *header_for(0, 100, "nodeA", 3));
    auto on_b = header_for(1, 100, "nodeB", 3);
    on_b->anchor_monotonic_ns += kAhead;
    const int64_t p1 = b.add_process("seg-100", *on_b);
    auto on_c = header_for(2, 200, "nodeC", 3);
    on_c->anchor_realtime_ns += 7'000'000;  // CLOCK_REALTIME - CLOCK_MONOTONIC: 7 ms more than node A's
    const int64_t p2 = c.add_process("seg-200", *on_c);
    test::Records ra(a), rb(b), rc(c);
    for (uint32_t k = 1; k <= 5; ++k) {
      const int64_t start = 1'000'000 + int64_t(k) * 100'000;  // node A's clock
      // Rank 0 arrives first and waits 60 µs; rank 1 arrives 60 µs later (20 µs early in the third,
      // as its GPU was still busy: its slice starts then, ends 40 µs early).
      collective(ra, p0, Api::ncclAllReduce, 100, kComm, k, 0, uint64_t(start), uint64_t(start + 100), 70'000);
      const int64_t late = k == 3 ? 20'000 : 60'000;
      collective(rb, p1, Api::ncclAllReduce, 100, kComm, k, 1, uint64_t(start + late + kAhead),
                 uint64_t(start + late + kAhead + 100), 10'000);
    }
    collective(rc, p2, Api::ncclBroadcast, 200, kOtherComm, 1, 0, 2'000'000, 2'000'100, 1000);
    ra.store();
    rb.store();
    rc.store();
    a.commit();
    b.commit();
    c.commit();
  }
  RunDatabase a(node_a), b(node_b), c(node_c);
  const std::vector<ClockAlignment> clocks = align_clocks({&a, &b, &c});
  ASSERT_EQ(clocks.size(), 3u);
  EXPECT_EQ(clocks[0].offset_ns, 0);
  EXPECT_EQ(clocks[0].aligned_by, "first");
  EXPECT_EQ(clocks[1].offset_ns, -kAhead);
  EXPECT_EQ(clocks[1].aligned_by, "collectives");
  EXPECT_EQ(clocks[1].collectives, 5);
  EXPECT_EQ(clocks[1].spread_ns, 0) << "four of the five agree exactly";
  EXPECT_EQ(clocks[2].offset_ns, 7'000'000);
  EXPECT_EQ(clocks[2].aligned_by, "wall clock");

  std::ostringstream out;
  export_chrome_trace({&a, &b, &c}, out);
  const Json trace = Json::parse(out.str());
  ASSERT_EQ(trace["otherData"]["databases"].size(), 3u);
  EXPECT_EQ(trace["otherData"]["databases"][1]["clock_offset_ns"], -kAhead);
  EXPECT_EQ(trace["otherData"]["databases"][1]["aligned_by"], "collectives");
  // Every node's pid is 100 or 200: each process under its own, per database.
  EXPECT_EQ(metadata(trace, "process_name", kSharedPidBase + 1), R"j({"name":"rank 0 (nodeA, pid 100)"})j");
  EXPECT_EQ(metadata(trace, "process_name", kSharedPidBase + kSharedPidPerDatabase + 1),
            R"j({"name":"rank 1 (nodeB, pid 100)"})j");
  // The first all-reduce's GPU slices end together on the trace's clock: rank 0's from 0 µs (the
  // trace's first call) for 70 µs, rank 1's from 60 µs for 10 µs.
  EXPECT_NE(find_slice(trace, kSharedPidBase + 1, "ncclAllReduce", 0.0, true), nullptr) << out.str();
  const Json* on_b = find_slice(trace, kSharedPidBase + kSharedPidPerDatabase + 1, "ncclAllReduce", 60.0, true);
  ASSERT_NE(on_b, nullptr) << out.str();
  EXPECT_EQ((*on_b)["dur"].get<double>(), 10.0);
}

// The step track numbers the steps as `trainshim report` does: step k from the k-th return of the
// sync that marks steps to the next; `--step` names that sync.
TEST_F(ExportTest, StepTrackNumbersTheReportsSteps) {
  {
    Database db(path_, "unitjob");
    const int64_t p = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    db.add_python_frame(p, 1, 0, "train.py", "train_step", 57, "loss.item()");
    test::Records records(db);
    for (const uint64_t at : {1'000'000, 3'000'000, 6'000'000, 10'000'000}) {
      EventRecord r = record(Api::cudaStreamSynchronize, 100);
      r.python_stack = 1;
      records.add(p, r, at, at + 500'000);
    }
    records.store();
    db.commit();
  }
  const std::pair<std::string, double> expected[] = {{"step 0", 500.0}, {"step 1", 2500.0}, {"step 2", 5500.0}};
  const double lengths[] = {2000.0, 3000.0, 4000.0};
  for (const std::string step : {"", "train.py:57", "train_step"}) {
    RunDatabase db(path_);
    std::ostringstream out;
    export_chrome_trace(db, out, step);
    const Json trace = Json::parse(out.str());
    EXPECT_EQ(metadata(trace, "thread_name", kPid0, kStepTrackTid), R"({"name":"steps"})") << step;
    std::vector<Json> steps;
    for (const Json& x : with_phase(trace, "X"))
      if (x["cat"] == "step") steps.push_back(x);
    ASSERT_EQ(steps.size(), std::size(expected)) << step << "\n" << out.str();
    for (std::size_t k = 0; k < steps.size(); ++k) {
      EXPECT_EQ(steps[k]["name"], expected[k].first);
      EXPECT_EQ(steps[k]["tid"], kStepTrackTid);
      EXPECT_EQ(steps[k]["ts"].get<double>(), expected[k].second) << step << " " << k;
      EXPECT_EQ(steps[k]["dur"].get<double>(), lengths[k]) << step << " " << k;
    }
  }
  // A step named by a sync that never ran: no step is found, and there is no step track.
  RunDatabase db(path_);
  std::ostringstream out;
  export_chrome_trace(db, out, "other.py:1");
  const Json trace = Json::parse(out.str());
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kStepTrackTid), "");
  for (const Json& x : with_phase(trace, "X")) EXPECT_NE(x["cat"], "step");
}

TEST_F(ExportTest, DroppedEventCountersAtStartAndEnd) {
  write_two_rank_run();
  const Json trace = export_json();
  std::map<int64_t, std::vector<Json>> dropped;
  for (const Json& c : with_phase(trace, "C"))
    if (c["name"] == "dropped events") dropped[c["pid"].get<int64_t>()].push_back(c);
  ASSERT_EQ(dropped[kPid0].size(), 2u);
  ASSERT_EQ(dropped[kPid1].size(), 2u);
  EXPECT_EQ(dropped[kPid0][0]["ts"].get<double>(), 0.0);
  EXPECT_EQ(dropped[kPid0][1]["ts"].get<double>(), 30.7);  // the end of its last GPU slice
  EXPECT_EQ(dropped[kPid0][0]["args"],
            (Json{{"ring_full", 5}, {"not_ready", 1}, {"unpublished", 0}, {"malformed", 2}, {"side_ring_full", 0}}));
  EXPECT_EQ(dropped[kPid0][1]["args"], dropped[kPid0][0]["args"]);
  EXPECT_EQ(dropped[kPid1][0]["ts"].get<double>(), 1000.0);
  EXPECT_EQ(dropped[kPid1][1]["ts"].get<double>(), 1022.0);
  EXPECT_EQ(dropped[kPid1][1]["args"]["ring_full"], 6200);
}

TEST_F(ExportTest, EmptyDatabaseIsAValidTraceWithoutSlices) {
  { Database db(path_, "unitjob"); }
  const Json trace = export_json();
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_TRUE(with_phase(trace, "X").empty());
  EXPECT_EQ(trace["displayTimeUnit"], "ns");
}

TEST_F(ExportTest, CommandWritesTheFileAndRefusesBadArguments) {
  write_two_rank_run();
  const std::string out = dir_ + "/trace.json";
  export_trace({path_}, "chrome", out);
  std::ifstream in(out);
  const Json trace = Json::parse(in);
  EXPECT_EQ(with_phase(trace, "X").size(), 17u);  // 8 host calls, 2 Python frames, 5 GPU collectives, 2 waits
  // Written beside its name, then renamed into place: nothing else is left in the directory.
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"trace.json", "trainshim-unitjob.db"}));

  auto message = [](auto&& call) {
    try {
      call();
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no UsageError");
  };
  EXPECT_NE(message([&] { export_trace({dir_ + "/missing.db"}, "chrome", out); }).find("no such database"),
            std::string::npos);
  EXPECT_NE(message([&] { export_trace({path_}, "chrome", dir_ + "/no/such/dir/trace.json"); }).find("-o"),
            std::string::npos);
  // Kineto's traces are a folder: not standard output, not where a file is.
  EXPECT_EQ(message([&] { export_trace({path_}, "kineto", "-"); }),
            "--format kineto writes a file per rank: pass a folder with -o DIR");
  EXPECT_EQ(message([&] { export_trace({path_}, "kineto", out); }),
            out + ": not a folder, and --format kineto writes a file per rank: pass a folder with -o");
  EXPECT_NE(message([&] { export_trace({path_}, "kineto", out + "/under/a/file"); }).find("cannot make the folder"),
            std::string::npos);
}

// A FIFO (as a device such as /dev/stdout) is written where it is: renaming a file over it would
// replace the FIFO and leave its reader waiting.
TEST_F(ExportTest, FifoIsWrittenInPlaceAndItsReaderGetsTheWholeTrace) {
  write_two_rank_run();
  const std::string fifo = dir_ + "/trace.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // The reader is open before the export (so that opening the FIFO to write does not wait), and
  // the pipe holds the whole trace (so that the export does not wait for it to be read).
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(reader, 0);
  ASSERT_GE(fcntl(reader, F_SETPIPE_SZ, 1 << 20), 1 << 20);
  export_trace({path_}, "chrome", fifo);
  std::string received;
  char buffer[4096];
  for (ssize_t n; (n = read(reader, buffer, sizeof buffer)) > 0;) received.append(buffer, std::size_t(n));
  close(reader);

  EXPECT_TRUE(fs::is_fifo(fifo));
  export_json();
  EXPECT_EQ(received, text_);
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_)) names.insert(entry.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"trace.fifo", "trainshim-unitjob.db"}));
}

// The GPU timeline: one track per (device, CUPTI stream) with its kernels, copies and memsets on
// the host's clock, and per device an idle track marking the stretches above 1 ms between them.
TEST_F(ExportTest, GpuTimelineTracksPerStreamAndIdleGapsPerDevice) {
  const std::string sgemm = "ampere_sgemm_128x64_tn";
  const std::string bf16 =
      "_ZN7cutlass7Kernel2I56cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn_align8EEvNT_6ParamsE";
  int64_t p = 0;
  {
    Database db(path_, "unitjob");
    p = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    test::Records records(db);
    records.add(p, copy(Api::cudaMemcpyAsync, 100, 4096, Direction::HostToDevice, HostMemory::Pageable), 1'000'000,
                1'003'500);
    test::add_gpu_rows(db, records, p,
                       {{.api = Api::gpuMemcpy,
                         .start_ns = 1'500'000,
                         .end_ns = 4'500'000,
                         .stream = 7,
                         .bytes = 4096,
                         .direction = Direction::HostToDevice,
                         .host_memory = HostMemory::Pageable,
                         .correlation = 10},
                        {.start_ns = 10'000'000, .end_ns = 14'000'000, .stream = 7, .name = sgemm, .correlation = 11},
                        {.start_ns = 12'000'000, .end_ns = 13'000'000, .stream = 13, .name = bf16, .correlation = 12},
                        {.api = Api::gpuMemset,
                         .start_ns = 14'500'000,
                         .end_ns = 14'700'000,
                         .stream = 13,
                         .bytes = 256,
                         .correlation = 13},
                        {.start_ns = 20'000'000, .end_ns = 21'000'000, .stream = 7, .name = sgemm, .correlation = 14},
                        {.start_ns = 2'000'000,
                         .end_ns = 2'500'000,
                         .device = 1,
                         .stream = 20,
                         .name = "triton_poi_fused_mul_silu_2",
                         .correlation = 15},
                        {.start_ns = 2'600'000,
                         .end_ns = 2'700'000,
                         .device = 1,
                         .stream = 20,
                         .name = "triton_poi_fused_mul_silu_2",
                         .correlation = 16},
                        // Exactly 1 ms after the last one: not above the threshold.
                        {.start_ns = 3'700'000,
                         .end_ns = 3'800'000,
                         .device = 1,
                         .stream = 20,
                         .name = "triton_poi_fused_mul_silu_2",
                         .correlation = 17}});
    db.update_process(p, {.events = 9, .gpu_timeline = uint32_t(GpuTimeline::On), .ended = true});
    records.store();
    db.commit();
  }
  const Json trace = export_json();

  constexpr int64_t kBase = kGpuActivityTrackBase;
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kBase), R"({"name":"GPU 0 stream 7"})");
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kBase + 1), R"({"name":"GPU 0 stream 13"})");
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kBase + 2), R"({"name":"GPU 1 stream 20"})");
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kBase + 3), R"({"name":"GPU 0 idle"})");
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kBase + 4), R"({"name":"GPU 1 idle"})");
  EXPECT_EQ(metadata(trace, "thread_sort_index", kPid0, kBase + 4), fmt::format(R"({{"sort_index":{}}})", kBase + 4));
  EXPECT_EQ(metadata(trace, "thread_name", kPid0, kBase + 5), "");

  struct Expected {
    int64_t tid;
    const char* cat;
    std::string name;
    double ts, dur;
    Json args;
  };
  const std::string bf16_shown =
      "void cutlass::Kernel2<cutlass_80_tensorop_s16816gemm_bf16_64x64_64x6_tn_align8>(cutlass_80_tensorop_s16816gemm_"
      "bf16_64x64_64x6_tn_align8::Params)";
  const Expected expected[] = {
      {kBase, "gpu_copy", "memcpy h2d", 500.0, 3000.0,
       Json{{"bytes", 4096}, {"direction", "h2d"}, {"host_memory", "pageable"}}},
      {kBase + 2, "gpu_kernel", "triton_poi_fused_mul_silu_2", 1000.0, 500.0, Json::object()},
      {kBase + 2, "gpu_kernel", "triton_poi_fused_mul_silu_2", 1600.0, 100.0, Json::object()},
      {kBase + 2, "gpu_kernel", "triton_poi_fused_mul_silu_2", 2700.0, 100.0, Json::object()},
      {kBase + 3, "gpu_idle", "GPU idle", 3500.0, 5500.0, Json{{"device", 0}, {"idle_ns", 5'500'000}}},
      {kBase, "gpu_kernel", sgemm, 9000.0, 4000.0, Json{{"gemm_precision", "fp32"}}},
      {kBase + 1, "gpu_kernel", bf16_shown, 11000.0, 1000.0, Json{{"gemm_precision", "bf16"}}},
      {kBase + 1, "gpu_memset", "memset", 13500.0, 200.0, Json{{"bytes", 256}}},
      {kBase + 3, "gpu_idle", "GPU idle", 13700.0, 5300.0, Json{{"device", 0}, {"idle_ns", 5'300'000}}},
      {kBase, "gpu_kernel", sgemm, 19000.0, 1000.0, Json{{"gemm_precision", "fp32"}}},
  };
  std::vector<Json> gpu;
  for (const Json& x : with_phase(trace, "X"))
    if (x["tid"].get<int64_t>() >= kBase) gpu.push_back(x);
  ASSERT_EQ(gpu.size(), std::size(expected)) << text_;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    const Expected& x = expected[i];
    EXPECT_EQ(gpu[i]["pid"], kPid0);
    EXPECT_EQ(gpu[i]["tid"], x.tid) << i;
    EXPECT_EQ(gpu[i]["cat"], x.cat) << i;
    EXPECT_EQ(gpu[i]["name"], x.name) << i;
    EXPECT_EQ(gpu[i]["ts"].get<double>(), x.ts) << i;
    EXPECT_EQ(gpu[i]["dur"].get<double>(), x.dur) << i;
    EXPECT_EQ(gpu[i]["args"], x.args) << i;
  }
  EXPECT_EQ(trace["otherData"]["gpu_idle"],
            "each device's idle track marks the stretches above 1 ms between its kernels, copies and memsets; with a "
            "duty-cycled GPU timeline (TRAINSHIM_GPU_PERIOD_MS) the stretch between two windows is marked 'not "
            "recorded' there, never idle; the causes of the idle time are in `trainshim report`");
  // The process's span ends with its last GPU activity.
  std::vector<double> dropped_at;
  for (const Json& c : with_phase(trace, "C"))
    if (c["name"] == "dropped events") dropped_at.push_back(c["ts"].get<double>());
  EXPECT_EQ(dropped_at, (std::vector<double>{0.0, 20000.0}));
}

// With the duty cycle, the timeline is off between its windows: a gap that runs past an off edge is
// idle up to it and not recorded from it to the next window's first activity, never idle.
TEST_F(ExportTest, TimeBetweenTheTimelinesWindowsIsNotRecordedNotIdle) {
  int64_t p = 0;
  {
    Database db(path_, "unitjob");
    p = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    test::Records records(db);
    records.add(p, record(Api::gpuTimelineOn, 100), 500'000, 500'000);
    records.add(p, record(Api::gpuTimelineOff, 100), 10'000'000, 10'000'000);
    records.add(p, record(Api::gpuTimelineOn, 100), 40'000'000, 40'000'000);
    test::add_gpu_rows(db, records, p,
                       {{.start_ns = 1'000'000, .end_ns = 2'000'000, .stream = 7, .name = "k", .correlation = 1},
                        {.start_ns = 5'000'000, .end_ns = 6'000'000, .stream = 7, .name = "k", .correlation = 2},
                        {.start_ns = 50'000'000, .end_ns = 51'000'000, .stream = 7, .name = "k", .correlation = 3}});
    db.update_process(p, {.events = 6, .gpu_timeline = uint32_t(GpuTimeline::On), .ended = true});
    records.store();
    db.commit();
  }
  const Json trace = export_json();
  std::vector<std::tuple<std::string, std::string, double, double>> marks;  // cat, name, ts, dur
  for (const Json& x : with_phase(trace, "X"))
    if (x["cat"] == "gpu_idle" || x["cat"] == "gpu_not_recorded")
      marks.emplace_back(x["cat"], x["name"], x["ts"].get<double>(), x["dur"].get<double>());
  // Times from the first recorded call, the first edge at 0.5 ms.
  EXPECT_EQ(marks, (std::vector<std::tuple<std::string, std::string, double, double>>{
                       {"gpu_idle", "GPU idle", 1500.0, 3000.0},
                       {"gpu_idle", "GPU idle", 5500.0, 4000.0},
                       {"gpu_not_recorded", "not recorded (GPU timeline off)", 9500.0, 40000.0}}))
      << text_;
}

// One stream's records can overlap by a few ns once put on the host's clock: a record that starts
// before the previous one ended is drawn from that end (viewers drop a partly overlapping slice);
// one inside another stays nested; the next stream is a track of its own.
TEST_F(ExportTest, AStreamsOverlappingRecordIsDrawnFromThePreviousEnd) {
  {
    Database db(path_, "unitjob");
    const int64_t p = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    test::Records records(db);
    records.add(p, record(Api::gpuTimelineOn, 100), 1'000'000, 1'000'000);
    test::add_gpu_rows(db, records, p,
                       {{.start_ns = 1'000'000, .end_ns = 2'000'000, .stream = 7, .name = "a", .correlation = 1},
                        {.start_ns = 1'200'000, .end_ns = 1'500'000, .stream = 7, .name = "b", .correlation = 2},
                        {.start_ns = 1'999'800, .end_ns = 3'000'000, .stream = 7, .name = "c", .correlation = 3},
                        {.start_ns = 1'999'900, .end_ns = 2'500'000, .stream = 13, .name = "d", .correlation = 4}});
    db.update_process(p, {.events = 5, .gpu_timeline = uint32_t(GpuTimeline::On), .ended = true});
    records.store();
    db.commit();
  }
  const Json trace = export_json();
  std::vector<std::tuple<std::string, int64_t, double, double>> kernels;  // name, tid, ts, dur
  for (const Json& x : with_phase(trace, "X"))
    if (x["cat"] == "gpu_kernel")
      kernels.emplace_back(x["name"], x["tid"], x["ts"].get<double>(), x["dur"].get<double>());
  EXPECT_EQ(kernels, (std::vector<std::tuple<std::string, int64_t, double, double>>{
                         {"a", kGpuActivityTrackBase, 0.0, 1000.0},
                         {"b", kGpuActivityTrackBase, 200.0, 300.0},
                         {"c", kGpuActivityTrackBase, 1000.0, 1000.0},
                         {"d", kGpuActivityTrackBase + 1, 999.9, 500.1}}))
      << text_;
}

// Copies and polls are kept one by one only in a window of each process's most recent ones: the
// trace shows that window and says so; the report still counts every copy; a wait is named after
// the copy it followed even when that copy is no longer in the window.
TEST_F(ExportTest, RecentWindowOfCopiesAndPollsIsShownAndSaidToBeAWindow) {
  {
    Database db(path_, "unitjob");
    const int64_t p = db.add_process("seg-100", *header_for(0, 100, "nodeA"));
    test::Records records(db, 4);
    records.add(p, copy(Api::cudaMemcpyAsync, 100, 512, Direction::DeviceToHost, HostMemory::Pinned), 1'000'000,
                1'000'100);
    // A blocking copy into pageable memory with its stack: kept in `events`, outside the window, and shown.
    EventRecord blocking = copy(Api::cudaMemcpy, 100, 256, Direction::DeviceToHost, HostMemory::Pageable);
    blocking.native_stack = 6;
    records.add(p, blocking, 1'001'000, 1'001'050);
    db.add_native_frame(p, 6, 0, {0x2000, "/x/train", "read_result()", "train.cpp", 12});
    EventRecord to_cpu = record(Api::cudaStreamSynchronize, 100);
    to_cpu.stream = 0x7f00;
    to_cpu.native_stack = 5;
    records.add(p, to_cpu, 1'002'000, 1'002'400);
    db.add_native_frame(p, 5, 0, {0x1000, "/x/libtorch_cpu.so", "at::_ops::_to_copy::call(at::Tensor const&)", "", 0});
    for (uint64_t i = 0; i < 9; ++i)
      records.add(p, copy(Api::cudaMemcpyAsync, 100, 4096, Direction::HostToDevice, HostMemory::Pinned),
                  1'003'000 + i * 1000, 1'003'100 + i * 1000);
    for (uint64_t i = 0; i < 3; ++i)
      records.add(p, record(Api::cudaStreamQuery, 100), 1'020'000 + i * 1000, 1'020'010 + i * 1000);
    db.update_process(p, {.events = 15, .ended = true});
    records.store();
    db.commit();
  }
  const Json trace = export_json();
  EXPECT_EQ(trace["otherData"]["copies_shown"], 2);
  EXPECT_EQ(trace["otherData"]["copies_recorded"], 11);
  EXPECT_EQ(trace["otherData"]["polls_shown"], 3);
  EXPECT_EQ(trace["otherData"]["polls_recorded"], 3);
  EXPECT_EQ(trace["otherData"]["window"],
            "shows 2 of the 11 copies and 3 of the 3 polls recorded (the most recent of each process, "
            "TRAINSHIM_RECENT_EVENTS per process); all other calls are shown");

  std::vector<std::pair<std::string, double>> slices;
  for (const Json& x : with_phase(trace, "X")) slices.emplace_back(x["name"], x["ts"].get<double>());
  const std::vector<std::pair<std::string, double>> expected = {
      {"cudaMemcpy()", 1.0},     {"Tensor.cpu() / .to('cpu')", 2.0}, {"memcpy h2d pinned", 11.0},
      {"cudaStreamQuery", 20.0}, {"cudaStreamQuery", 21.0},          {"cudaStreamQuery", 22.0}};
  EXPECT_EQ(slices, expected) << text_;

  RunDatabase db(path_);
  const Json report = render_json(load_report(db));
  ASSERT_EQ(report["ranks"].size(), 1u);
  EXPECT_EQ(report["ranks"][0]["copies"], Json::parse(R"([
      {"direction": "h2d", "host_memory": "pinned", "calls": 9, "bytes": 36864, "host_ns": 900},
      {"direction": "d2h", "host_memory": "pinned", "calls": 1, "bytes": 512, "host_ns": 100},
      {"direction": "d2h", "host_memory": "pageable", "calls": 1, "bytes": 256, "host_ns": 50}])"));
  EXPECT_EQ(report["ranks"][0]["polls"][0]["calls"], 3);
  EXPECT_EQ(report["ranks"][0]["hidden_syncs"][0]["operation"], "Tensor.cpu() / .to('cpu')");
}

// Counts what is written, keeps none of it, and notes at every 64 KiB how many rows SQLite had
// produced by then and how much heap was in use.
class CountingBuffer : public std::streambuf {
 public:
  explicit CountingBuffer(const int64_t* rows) : rows_(rows) {}
  struct Sample {
    int64_t bytes, rows;
    std::size_t heap;
  };
  std::vector<Sample> samples;
  int64_t bytes = 0, slices = 0;

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    // Each event is written whole: "ph":"X" never straddles two writes.
    const std::string_view text(s, std::size_t(n));
    for (auto at = text.find(R"("ph":"X")"); at != std::string_view::npos; at = text.find(R"("ph":"X")", at + 1))
      ++slices;
    if (bytes / kSampleBytes != (bytes + n) / kSampleBytes)
      samples.push_back({bytes + n, *rows_, mallinfo2().uordblks});
    bytes += n;
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) ++bytes;
    return c;
  }

 private:
  static constexpr int64_t kSampleBytes = 64 << 10;
  const int64_t* rows_;
};

int count_row(unsigned, void* context, void*, void*) {
  ++*static_cast<int64_t*>(context);
  return 0;
}

TEST_F(ExportTest, HundredThousandEventsAreWrittenWhileRead) {
  constexpr int kEvents = 100'000;
  {
    Database db(path_, "unitjob");
    const int64_t p[] = {db.add_process("seg-100", *header_for(0, 100, "nodeA")),
                         db.add_process("seg-101", *header_for(1, 101, "nodeB"))};
    // A window that holds every copy: the trace shows every call.
    test::Records records(db, kEvents);
    for (int k = 0; k < 2; ++k) {
      db.add_python_frame(p[k], 1, 0, "train.py", "train_step", 57, "loss.item()");
      db.add_native_frame(p[k], 1, 0,
                          {0x1000, "/x/libtorch_cuda.so", "at::native::_local_scalar_dense(at::Tensor const&)", "", 0});
    }
    for (int i = 0; i < kEvents; ++i) {
      const int64_t process = p[i % 2];
      const uint64_t t = 1'000'000 + uint64_t(i) * 1000;
      if (i % 3 == 0) {
        EventRecord r = record(Api::cudaStreamSynchronize, 100 + uint32_t(i % 2));
        r.native_stack = r.python_stack = 1;
        records.add(process, r, t, t + 500);
      } else {
        records.add(
            process,
            copy(Api::cudaMemcpyAsync, 100 + uint32_t(i % 2), 4096, Direction::HostToDevice, HostMemory::Pinned), t,
            t + 200);
      }
    }
    records.store();
    db.commit();
  }
  RunDatabase db(path_);
  int64_t rows = 0;
  ASSERT_EQ(sqlite3_trace_v2(db.handle(), SQLITE_TRACE_ROW, count_row, &rows), SQLITE_OK);
  CountingBuffer buffer(&rows);
  std::ostream out(&buffer);
  const std::size_t heap_before = mallinfo2().uordblks;
  export_chrome_trace(db, out);
  sqlite3_trace_v2(db.handle(), 0, nullptr, nullptr);

  // Every call, each sync's Python frame, and each process's steps between its 16,667 syncs.
  EXPECT_EQ(buffer.slices, kEvents + 2 * 16'667 + 2 * 16'666);
  ASSERT_GT(buffer.samples.size(), 20u);
  // Half of the trace was out while at most about half of the rows had been read (each process's
  // rows come sorted, so a process's rows are produced as its slices are written).
  const auto half = std::find_if(buffer.samples.begin(), buffer.samples.end(),
                                 [&](const auto& s) { return s.bytes >= buffer.bytes / 2; });
  ASSERT_NE(half, buffer.samples.end());
  EXPECT_LT(half->rows, rows * 3 / 4) << half->rows << " of " << rows << " rows read";
  EXPECT_LT(buffer.samples.front().rows, rows / 10);
  // The heap never held half the trace (SQLite's page cache and sorter take a few MB).
  std::size_t peak = heap_before;
  for (const auto& s : buffer.samples) peak = std::max(peak, s.heap);
  EXPECT_LT(peak - heap_before, std::size_t(buffer.bytes / 2))
      << "heap grew by " << peak - heap_before << " bytes for a trace of " << buffer.bytes;
}

}  // namespace
}  // namespace trainshim::cli
