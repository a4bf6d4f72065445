#include "render/export.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "analyse/classifier.hpp"
#include "analyse/kernels.hpp"
#include "analyse/steps.hpp"
#include "analyse/syncs.hpp"
#include "analyse/waits.hpp"
#include "store/call_rows.hpp"
#include "store/counters.hpp"
#include "store/rows.hpp"
#include "store/trace_rows.hpp"
#include "text/format.hpp"
#include "trainshim/protocol.hpp"

namespace trainshim::cli {

namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kUnrankedSortBase = 1'000'000;

// One event object per line, each serialised on its own: the trace is never held whole.
class TraceWriter {
 public:
  explicit TraceWriter(std::ostream& out) : out_(out) {}

  void open(const Json& other_data) {
    put(fmt::format("{{\"displayTimeUnit\":\"ns\",\"otherData\":{},\"traceEvents\":[", dump(other_data)));
  }
  void event(const Json& e) {
    put(first_ ? "\n" : ",\n");
    first_ = false;
    put(dump(e));
  }
  void close() {
    put("\n]}\n");
    out_.flush();
    check();
  }

 private:
  // Frames and source lines come from binaries and files of the job: invalid UTF-8 is replaced
  // rather than refused.
  static std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
  void put(const std::string& text) {
    out_.write(text.data(), std::streamsize(text.size()));
    check();
  }
  void check() const {
    // Not the user's mistake: the disk filled up or the reader went away (exit code 1).
    if (!out_)
      throw std::runtime_error("cannot write the trace: the output failed (disk full, or the reader closed the pipe?): "
                               "write it to a path with free space (-o trace.json)");
  }

  std::ostream& out_;
  bool first_ = true;
};

// A row of `processes`, as the trace names the process and shows its lost-event counters.
struct TraceProcess {
  int64_t id, pid, rank;
  std::string host, command;
  LostEvents lost;
  UntimedCollectives untimed;
  int64_t trace_pid = 0;  // its pid, or where two nodes' processes share one, kSharedPidBase + id
};

struct CollectiveKey {
  int64_t comm, sequence;
  bool operator==(const CollectiveKey&) const = default;
  bool operator<(const CollectiveKey& o) const { return std::tie(comm, sequence) < std::tie(o.comm, o.sequence); }
};

struct CollectiveKeyHash {
  std::size_t operator()(const CollectiveKey& k) const {
    return std::hash<uint64_t>()(uint64_t(k.comm) * 0x9E3779B97F4A7C15ULL ^ uint64_t(k.sequence));
  }
};

// What every rank's GPU slice of one (communicator, sequence) needs from the others.
struct CollectiveInfo {
  int64_t min_gpu_ns;
  uint32_t first, last;  // ordinals of the first and last process that timed it
  int64_t flow_id;
};

using CollectiveMap = std::unordered_map<CollectiveKey, CollectiveInfo, CollectiveKeyHash>;

// The flows from a collective's host call to its GPU slice, apart from those across ranks.
constexpr const char* kHostToGpuFlow = "host_to_gpu";

std::string hex(int64_t id) { return fmt::format("{:016x}", uint64_t(id)); }

std::string process_name(const TraceProcess& p) {
  return p.rank >= 0 ? fmt::format("rank {} ({}, pid {})", p.rank, p.host, p.pid)
                     : fmt::format("process ({}, pid {})", p.host, p.pid);
}

Json metadata(const char* name, int64_t pid, int64_t tid, Json args) {
  return Json{{"ph", "M"}, {"name", name}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// Exports one process: its threads' calls, its GPU collective tracks, its lost-event counters.
class ProcessExporter {
 public:
  ProcessExporter(const RunDatabase& db, const Vocabulary& names, const CollectiveMap& collectives, TraceWriter& writer,
                  int64_t origin_ns, const TraceProcess& process, uint32_t ordinal, std::size_t process_count,
                  const std::string& step_name)
      : db_(db),
        names_(names),
        collectives_(collectives),
        writer_(writer),
        origin_(origin_ns),
        p_(process),
        ordinal_(ordinal),
        process_count_(process_count),
        step_name_(step_name) {}

  void run() {
    writer_.event(metadata("process_name", p_.trace_pid, 0, {{"name", process_name(p_)}}));
    writer_.event(metadata("process_sort_index", p_.trace_pid, 0,
                           {{"sort_index", p_.rank >= 0 ? p_.rank : kUnrankedSortBase + ordinal_}}));
    if (!p_.command.empty()) writer_.event(metadata("process_labels", p_.trace_pid, 0, {{"labels", p_.command}}));
    for_each_timed_collective(db_, p_.id, [this](const TimedCollectiveRow& row) {
      timed_.insert({row.communicator, row.sequence});
    });
    host_calls();
    step_track();
    gpu_collectives();
    gpu_activities();
    counters();
  }

 private:
  struct SyncInfo {
    std::string name, python_site, native_site, source, kind;
  };
  double us(int64_t ns) const { return double(ns - origin_) / 1000.0; }
  static double duration_us(int64_t ns) { return double(std::max<int64_t>(ns, 0)) / 1000.0; }
  void seen(int64_t begin, int64_t end) {
    first_ns_ = std::min(first_ns_, begin);
    last_ns_ = std::max(last_ns_, std::max(begin, end));
  }

  const std::vector<NativeFrameView>& native_frames(int64_t stack) {
    auto [it, fresh] = native_cache_.try_emplace(stack);
    if (fresh && stack != 0) it->second = read_native_stack(db_, p_.id, stack);
    return it->second;
  }

  const std::vector<PythonFrameView>& python_frames(int64_t stack) {
    auto [it, fresh] = python_cache_.try_emplace(stack);
    if (fresh && stack != 0) it->second = read_python_stack(db_, p_.id, stack);
    return it->second;
  }

  // "file:line in function" of the user's own Python frame, and its source line.
  std::pair<std::string, std::string> python_site(int64_t stack) {
    const auto& frames = python_frames(stack);
    const int top = top_user_python_frame(frames);
    if (top < 0) return {};
    const auto& f = frames[std::size_t(top)];
    return {fmt::format("{}:{} in {}", f.file, f.line, f.function), f.source};
  }

  const SyncInfo& sync_info(const SyncShape& probe, int64_t api, int64_t native, int64_t python) {
    auto [it, fresh] =
        sync_cache_.try_emplace({api, probe.direction, probe.host_memory, native, python, probe.follows_copy});
    if (!fresh) return it->second;
    SyncShape shape = probe;
    shape.native = native_frames(native);
    shape.python = python_frames(python);
    const Classification c = classify(shape);
    SyncInfo& info = it->second;
    info.name = c.operation;
    info.kind = c.kind == SyncKind::Explicit ? "explicit" : "hidden";
    std::tie(info.python_site, info.source) = python_site(python);
    if (info.python_site.empty())
      if (const int top = top_user_native_frame(shape.native); top >= 0) {
        const auto& f = shape.native[std::size_t(top)];
        info.native_site = f.function.empty() ? f.module : f.function;
        if (!f.file.empty()) info.native_site += fmt::format(" at {}:{}", f.file, f.line);
      }
    return info;
  }

  void thread(int64_t tid) {
    if (!tids_.insert(tid).second) return;
    const std::string name = tid == p_.pid ? fmt::format("main thread (tid {})", tid) : fmt::format("tid {}", tid);
    writer_.event(metadata("thread_name", p_.trace_pid, tid, {{"name", name}}));
  }

  void host_calls() {
    // The calls kept one by one and the window of recent copies and polls.
    for_each_host_call(db_, p_.id, [this](const HostCallRow& call) { host_call(call); });
  }

  void host_call(const HostCallRow& call) {
    const Vocabulary::ApiWord& api_word = names_.api(call.api);
    const std::string& api_name = api_word.name;
    const std::optional<ApiClass> cls = api_word.api_class;
    const std::string_view dir = direction_name(call.direction), mem = host_memory_name(call.host_memory);
    thread(call.tid);
    seen(call.begin_ns, call.end_ns);

    std::string name;
    Json args = Json::object();
    args["api"] = api_name;
    const bool null_object = call.object == 0;
    if (cls && is_host_sync(*cls, call.direction, call.host_memory, is_synchronous_copy(*cls, api_name), null_object)) {
      SyncShape probe;
      probe.api = api_name;
      probe.api_class = *cls;
      probe.direction = call.direction;
      probe.host_memory = call.host_memory;
      probe.null_object = null_object;
      probe.follows_copy = call.follows_copy;
      const SyncInfo& info = sync_info(probe, call.api, call.native_stack, call.python_stack);
      name = info.name;
      if (!info.python_site.empty()) {
        args["python_site"] = info.python_site;
        args["source"] = info.source;
      } else if (!info.native_site.empty()) {
        args["native_site"] = info.native_site;
      }
      args["bytes"] = call.bytes;
      args["direction"] = dir;
      args["host_memory"] = mem;
      args["kind"] = info.kind;
    } else if (cls == ApiClass::Copy) {
      name = fmt::format("memcpy {} {}", dir, mem);
      args["bytes"] = call.bytes;
      args["direction"] = dir;
      args["host_memory"] = mem;
      args["stream"] = fmt::format("0x{:x}", uint64_t(call.stream));
    } else if (cls == ApiClass::Collective) {
      name = api_name;
      args["communicator"] = hex(call.object);
      args["bytes"] = call.bytes;
      args["rank_in_comm"] = call.rank_in_comm;
      args["comm_size"] = call.comm_size;
      if (auto [site, source] = python_site(call.python_stack); !site.empty()) args["python_site"] = site;
    } else if (cls == ApiClass::CommInit) {
      name = api_name;
      args["communicator"] = hex(call.detail);
      args["rank_in_comm"] = call.rank_in_comm;
      args["comm_size"] = call.comm_size;
    } else {
      name = api_name;
      if (call.bytes) args["bytes"] = call.bytes;
    }
    if (call.result != 0) args["result"] = call.result;
    const double ts = us(call.begin_ns), dur = duration_us(call.end_ns - call.begin_ns);
    frame_slices(call, ts, dur);
    writer_.event(Json{{"ph", "X"},
                       {"cat", cls ? api_class_name(*cls) : "unknown"},
                       {"name", name},
                       {"pid", p_.trace_pid},
                       {"tid", call.tid},
                       {"ts", ts},
                       {"dur", dur},
                       {"args", std::move(args)}});
    if (cls == ApiClass::Collective)
      if (const std::optional<int64_t> id = host_flow_id({call.object, call.sequence}))
        writer_.event(flow_point("s", *id, kHostToGpuFlow, name, call.tid, ts + dur / 2));
  }

  // The Python frames the call was made from, outermost first, as slices enclosing it on its thread
  // (a viewer nests slices of equal times in the order written): the code path to each call, as a
  // profiler's call tree shows it. A stack an autograd thread borrowed from the thread blocked in
  // backward is that thread's, not this one's: not nested here.
  void frame_slices(const HostCallRow& call, double ts, double dur) {
    if (call.python_stack == 0) return;
    auto [borrowed, fresh] = borrowed_.try_emplace(call.python_stack);
    if (fresh) borrowed->second = python_stack_borrowed(db_, p_.id, call.python_stack);
    if (borrowed->second) return;
    const std::vector<PythonFrameView>& frames = python_frames(call.python_stack);
    for (auto f = frames.rbegin(); f != frames.rend(); ++f)
      writer_.event(Json{{"ph", "X"},
                         {"cat", "python"},
                         {"name", f->function},
                         {"pid", p_.trace_pid},
                         {"tid", call.tid},
                         {"ts", ts},
                         {"dur", dur},
                         {"args", {{"file", f->file}, {"line", f->line}}}});
  }

  // The flow from a collective's host call to its GPU slice: only for a (communicator, number)
  // this process timed, once (a group's calls share their operation's timing); its id is unique
  // in the trace, one per process and collective.
  std::optional<int64_t> host_flow_id(const CollectiveKey& key) {
    const auto info = collectives_.find(key);
    if (info == collectives_.end() || !timed_.count(key) || !host_flows_.insert(key).second) return std::nullopt;
    return info->second.flow_id * int64_t(process_count_) + ordinal_;
  }

  Json flow_point(const char* phase, int64_t id, const char* cat, const std::string& name, int64_t tid,
                  double ts) const {
    return Json{{"ph", phase},         {"cat", cat}, {"name", name}, {"id", id},
                {"pid", p_.trace_pid}, {"tid", tid}, {"ts", ts},     {"bp", "e"}};
  }

  // The process's steps as `trainshim report` finds them, numbered as its steps and gaps are: step
  // k from the k-th step start to the next (the last start's end is not known).
  void step_track() {
    const Steps steps = load_steps(db_, p_.id, step_name_, load_collective_sequence(db_, p_.id));
    if (steps.starts_ns.size() < 2) return;
    track_metadata(kStepTrackTid, "steps");
    for (std::size_t k = 0; k + 1 < steps.starts_ns.size(); ++k)
      writer_.event(Json{{"ph", "X"},
                         {"cat", "step"},
                         {"name", fmt::format("step {}", k)},
                         {"pid", p_.trace_pid},
                         {"tid", kStepTrackTid},
                         {"ts", us(steps.starts_ns[k])},
                         {"dur", duration_us(steps.starts_ns[k + 1] - steps.starts_ns[k])},
                         {"args", {{"found", steps.rule}}}});
  }

  // Each timed collective on its communicator's GPU track, from its own row (a call in a group
  // carries its operation's timing on the operation's first call).
  void gpu_collectives() {
    std::optional<CollectiveKey> flow_key;
    std::optional<int64_t> track_comm;
    int64_t track_tid = kGpuTrackBase - 1, track_end = std::numeric_limits<int64_t>::min();
    for_each_timed_collective(db_, p_.id, [&](const TimedCollectiveRow& row) {
      const CollectiveKey key{row.communicator, row.sequence};
      const int64_t host_begin = row.host_begin_ns, gpu_ns = std::max<int64_t>(row.gpu_ns, 0), bytes = row.bytes;
      if (track_comm != key.comm) {
        track_comm = key.comm;
        ++track_tid;
        track_end = std::numeric_limits<int64_t>::min();
        writer_.event(metadata("thread_name", p_.trace_pid, track_tid, {{"name", "GPU collectives " + hex(key.comm)}}));
        writer_.event(metadata("thread_sort_index", p_.trace_pid, track_tid, {{"sort_index", track_tid}}));
      }
      const int64_t start = std::max(host_begin, track_end);
      track_end = start + gpu_ns;
      seen(start, track_end);

      const auto info = collectives_.find(key);
      const int64_t wait = info == collectives_.end() ? 0 : gpu_ns - info->second.min_gpu_ns;
      const double ts = us(start), dur = duration_us(gpu_ns);
      const std::string& name = names_.api(row.api).name;
      // The arguments are the same for every call of one communicator and size, so that viewers
      // that group slices by name and arguments group them; what is per call (its number, its
      // wait) is in the flows and in the nested wait slice.
      writer_.event(Json{{"ph", "X"},
                         {"cat", "gpu_collective"},
                         {"name", name},
                         {"pid", p_.trace_pid},
                         {"tid", track_tid},
                         {"ts", ts},
                         {"dur", dur},
                         {"args", {{"communicator", hex(key.comm)}, {"bytes", bytes}}}});
      // The rank's wait for the others: its time beyond the shortest rank's, at the start, where
      // the kernel waits for the late rank's data.
      if (wait > 0)
        writer_.event(Json{{"ph", "X"},
                           {"cat", "gpu_collective_wait"},
                           {"name", "waiting for the other ranks"},
                           {"pid", p_.trace_pid},
                           {"tid", track_tid},
                           {"ts", ts},
                           {"dur", duration_us(wait)}});

      if (info == collectives_.end() || flow_key == key) return;
      flow_key = key;
      const std::string flow_name = fmt::format("{} #{}", name, key.sequence);
      if (host_flows_.count(key))
        writer_.event(flow_point("f", info->second.flow_id * int64_t(process_count_) + ordinal_, kHostToGpuFlow, name,
                                 track_tid, ts));
      // One flow point per process and (communicator, sequence), inside the slice it binds to.
      if (info->second.first != info->second.last) {
        const char* phase = ordinal_ == info->second.first ? "s" : ordinal_ == info->second.last ? "f" : "t";
        writer_.event(flow_point(phase, info->second.flow_id, "collective", flow_name, track_tid, ts + dur / 2));
      }
    });
  }

  // The GPU timeline (CUPTI's records): each kernel, copy and memset on its (device, stream) track,
  // and each idle stretch of a device above kExportIdleGapNs on the device's idle track.
  void gpu_activities() {
    std::map<std::pair<int64_t, int64_t>, int64_t> stream_tids;
    std::map<int64_t, int64_t> idle_tids;
    for (const auto& stream : read_gpu_streams(db_, p_.id)) stream_tids.emplace(stream, 0);
    if (stream_tids.empty()) return;
    int64_t tid = kGpuActivityTrackBase;
    for (auto& [key, track] : stream_tids) {
      track = tid++;
      idle_tids.emplace(key.first, 0);
      track_metadata(track, fmt::format("GPU {} stream {}", key.first, key.second));
    }
    for (auto& [device, track] : idle_tids) {
      track = tid++;
      track_metadata(track, fmt::format("GPU {} idle", device));
    }

    std::vector<int64_t> offs;  // when the duty cycle turned the timeline off, in order
    for (const auto& [at, on] : read_gpu_timeline_edges(db_, p_.id))
      if (!on) offs.push_back(at);
    GpuBusyUnion busy;
    std::vector<GpuBusyUnion::Gap> gaps;
    for_each_gpu_activity(db_, p_.id, [&](const GpuActivityRow& row) {
      const int64_t start = row.start_ns, end = row.end_ns, device = row.device;
      const std::optional<ApiClass> cls = names_.api(row.api).api_class;
      seen(start, end);
      busy.add(device, start, end, &gaps);
      for (const GpuBusyUnion::Gap& gap : gaps) gap_slices(idle_tids.at(gap.device), gap, offs);
      gaps.clear();

      std::string name;
      Json args = Json::object();
      if (cls == ApiClass::GpuKernel) {
        name = row.name.empty() ? "(unnamed kernel)" : readable_kernel_name(row.name);
        if (const KernelKind kind = classify_kernel(row.name); kind.gemm)
          args["gemm_precision"] = kernel_precision_name(kind.precision);
      } else if (cls == ApiClass::GpuCopy) {
        const std::string_view dir = direction_name(row.direction);
        const std::string_view mem = host_memory_name(row.host_memory);
        name = fmt::format("memcpy {}", dir);
        args["bytes"] = row.bytes;
        args["direction"] = dir;
        args["host_memory"] = mem;
      } else if (cls == ApiClass::GpuSet) {
        name = "memset";
        args["bytes"] = row.bytes;
      } else {
        name = names_.api(row.api).name;
      }
      writer_.event(Json{{"ph", "X"},
                         {"cat", cls ? api_class_name(*cls) : "unknown"},
                         {"name", std::move(name)},
                         {"pid", p_.trace_pid},
                         {"tid", stream_tids.at({device, row.stream})},
                         {"ts", us(start)},
                         {"dur", duration_us(end - start)},
                         {"args", std::move(args)}});
    });
  }

  void track_metadata(int64_t tid, const std::string& name) {
    writer_.event(metadata("thread_name", p_.trace_pid, tid, {{"name", name}}));
    writer_.event(metadata("thread_sort_index", p_.trace_pid, tid, {{"sort_index", tid}}));
  }

  // A gap between two activities: idle up to the first off edge in it, if any, and not recorded
  // from that edge to its end, the next window's first activity (until which the GPU may have run
  // work launched while the timeline was off).
  void gap_slices(int64_t tid, GpuBusyUnion::Gap gap, const std::vector<int64_t>& offs) {
    const auto off = std::upper_bound(offs.begin(), offs.end(), gap.start_ns);
    const bool leaves_window = off != offs.end() && *off < gap.end_ns;
    if (leaves_window) {
      const GpuBusyUnion::Gap recorded{gap.device, gap.start_ns, *off};
      if (recorded.end_ns - recorded.start_ns > kExportIdleGapNs) gap_slice(tid, recorded, true);
      gap.start_ns = *off;
      gap_slice(tid, gap, false);
    } else if (gap.end_ns - gap.start_ns > kExportIdleGapNs) {
      gap_slice(tid, gap, true);
    }
  }

  // A stretch of a device's idle track: the GPU idle (its cause is the report's, `trainshim
  // report`), or nothing recorded while the timeline was off.
  void gap_slice(int64_t tid, const GpuBusyUnion::Gap& gap, bool recorded) {
    const int64_t ns = gap.end_ns - gap.start_ns;
    writer_.event(Json{{"ph", "X"},
                       {"cat", recorded ? "gpu_idle" : "gpu_not_recorded"},
                       {"name", recorded ? "GPU idle" : "not recorded (GPU timeline off)"},
                       {"cname", recorded ? "grey" : "white"},
                       {"pid", p_.trace_pid},
                       {"tid", tid},
                       {"ts", us(gap.start_ns)},
                       {"dur", duration_us(ns)},
                       {"args", {{"device", gap.device}, {recorded ? "idle_ns" : "not_recorded_ns", ns}}}});
  }

  void counters() {
    const bool any = first_ns_ <= last_ns_;
    const double at[] = {any ? us(first_ns_) : 0.0, any ? us(last_ns_) : 0.0};
    for (const double ts : at) {
      writer_.event(Json{
          {"ph", "C"}, {"name", "dropped events"}, {"pid", p_.trace_pid}, {"ts", ts}, {"args", lost_json(p_.lost)}});
      writer_.event(Json{{"ph", "C"},
                         {"name", "untimed collectives"},
                         {"pid", p_.trace_pid},
                         {"ts", ts},
                         {"args", untimed_json(p_.untimed)}});
    }
  }

  const RunDatabase& db_;
  const Vocabulary& names_;
  const CollectiveMap& collectives_;
  TraceWriter& writer_;
  const int64_t origin_;
  const TraceProcess& p_;
  const uint32_t ordinal_;
  const std::size_t process_count_;
  const std::string& step_name_;
  std::unordered_set<CollectiveKey, CollectiveKeyHash> timed_;       // the collectives it timed on the GPU
  std::unordered_set<CollectiveKey, CollectiveKeyHash> host_flows_;  // those whose host call starts a flow
  int64_t first_ns_ = std::numeric_limits<int64_t>::max(), last_ns_ = std::numeric_limits<int64_t>::min();
  std::unordered_set<int64_t> tids_;
  std::unordered_map<int64_t, std::vector<NativeFrameView>> native_cache_;
  std::unordered_map<int64_t, std::vector<PythonFrameView>> python_cache_;
  std::unordered_map<int64_t, bool> borrowed_;  // by Python stack id
  std::map<std::tuple<int64_t, Direction, HostMemory, int64_t, int64_t, Direction>, SyncInfo> sync_cache_;
};

std::string window_words(const RecentWindow& w) {
  return fmt::format("shows {} of the {} copies and {} of the {} polls recorded (the most recent of each process, "
                     "TRAINSHIM_RECENT_EVENTS per process); all other calls are shown",
                     with_thousands(w.copies_shown), with_thousands(w.copies_recorded), with_thousands(w.polls_shown),
                     with_thousands(w.polls_recorded));
}

}  // namespace

void export_chrome_trace(const RunDatabase& db, std::ostream& out, const std::string& step_name) {
  const Vocabulary& names = db.vocabulary();

  std::vector<TraceProcess> processes;
  for (ProcessRow& row : read_processes(db))
    processes.push_back({row.id, row.pid, row.rank, std::move(row.host), std::move(row.command), row.lost,
                         read_untimed_collectives(db, row.id)});
  std::sort(processes.begin(), processes.end(), [](const TraceProcess& a, const TraceProcess& b) {
    return std::tuple(a.rank < 0, a.rank, a.pid, a.id) < std::tuple(b.rank < 0, b.rank, b.pid, b.id);
  });
  std::unordered_map<int64_t, int> sharing;  // processes per pid
  for (const TraceProcess& p : processes) ++sharing[p.pid];
  for (TraceProcess& p : processes) p.trace_pid = sharing[p.pid] == 1 ? p.pid : kSharedPidBase + p.id;
  std::unordered_map<int64_t, uint32_t> ordinal;
  for (std::size_t i = 0; i < processes.size(); ++i) ordinal.emplace(processes[i].id, uint32_t(i));
  const int64_t origin = read_first_call_ns(db);

  // The one pre-pass: per (communicator, sequence), the shortest GPU duration over all ranks and
  // the first and last process (in trace order) that timed it.
  CollectiveMap collectives;
  for_each_collective_gpu_time(db, [&](const CollectiveGpuRow& row) {
    const auto o = ordinal.find(row.process_id);
    if (o == ordinal.end()) return;
    const int64_t gpu_ns = std::max<int64_t>(row.min_gpu_ns, 0);
    auto [it, fresh] =
        collectives.try_emplace({row.communicator, row.sequence}, CollectiveInfo{gpu_ns, o->second, o->second, 0});
    if (fresh) {
      it->second.flow_id = int64_t(collectives.size());
      return;
    }
    it->second.min_gpu_ns = std::min(it->second.min_gpu_ns, gpu_ns);
    it->second.first = std::min(it->second.first, o->second);
    it->second.last = std::max(it->second.last, o->second);
  });

  TraceWriter writer(out);
  const RecentWindow window = read_recent_window(db);
  Json other{{"producer", "trainshim export"},
             {"job", db.meta("job")},
             {"database", db.path()},
             {"window", window_words(window)},
             {"copies_shown", window.copies_shown},
             {"copies_recorded", window.copies_recorded},
             {"polls_shown", window.polls_shown},
             {"polls_recorded", window.polls_recorded}};
  if (has_gpu_activities(db))
    other["gpu_idle"] = fmt::format(
        "each device's idle track marks the stretches above {} ms between its kernels, copies and memsets; with a "
        "duty-cycled GPU timeline (TRAINSHIM_GPU_PERIOD_MS) the stretch between two windows is marked 'not recorded' "
        "there, never idle; the causes of the idle time are in `trainshim report`",
        kExportIdleGapNs / 1'000'000);
  writer.open(other);
  for (std::size_t i = 0; i < processes.size(); ++i)
    ProcessExporter(db, names, collectives, writer, origin, processes[i], uint32_t(i), processes.size(), step_name)
        .run();
  writer.close();
}

}  // namespace trainshim::cli
