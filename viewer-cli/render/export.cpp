#include "render/export.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
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
  const RunDatabase* db = nullptr;
  std::size_t source = 0;  // its database's place among those exported
  // Its pid, or where two nodes' processes share one, kSharedPidBase + id (+ kSharedPidPerDatabase x source).
  int64_t trace_pid = 0;
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

// Where a process's flow point of one collective lies: the middle of its GPU slice (twice its time
// in ns, exact); between equal times, the process first in the trace comes first (the order a
// viewer reads them in).
struct FlowPoint {
  int64_t twice_ns;
  uint32_t ordinal;
  auto operator<=>(const FlowPoint&) const = default;
};

// What every rank's GPU slice of one (communicator, sequence) needs from the others.
struct CollectiveInfo {
  int64_t min_gpu_ns;
  // The earliest and the latest flow point (none before the pre-pass places them): a viewer reads a
  // flow's points in time order.
  std::optional<FlowPoint> first, last;
  int64_t flow_id;
};

// Where a process's timed collectives lie on its GPU tracks, one track per communicator: each at
// its host call, or at the end of the previous one of its communicator when the two would overlap
// (the GPU runs them one after the other; no GPU timestamps are recorded). Fed its rows in order
// (for_each_timed_collective).
class GpuTrackPlacement {
 public:
  // The row's start; `new_track`: the first of its communicator.
  int64_t place(const TimedCollectiveRow& row, bool* new_track = nullptr) {
    const bool fresh = comm_ != row.communicator;
    if (fresh) {
      comm_ = row.communicator;
      end_ = std::numeric_limits<int64_t>::min();
    }
    if (new_track) *new_track = fresh;
    const int64_t start = std::max(row.host_begin_ns, end_);
    end_ = start + std::max<int64_t>(row.gpu_ns, 0);
    return start;
  }

 private:
  std::optional<int64_t> comm_;
  int64_t end_ = std::numeric_limits<int64_t>::min();
};

using CollectiveMap = std::unordered_map<CollectiveKey, CollectiveInfo, CollectiveKeyHash>;

// The flows from a collective's host call to its GPU slice, apart from those across ranks.
constexpr const char* kHostToGpuFlow = "host_to_gpu";

std::string hex(int64_t id) { return fmt::format("{:016x}", uint64_t(id)); }

// Viewers show a process's pid beside its name: the name says the pid only where the trace's is
// not the process's own (two nodes' processes share it).
std::string process_name(const TraceProcess& p) {
  const std::string where = p.trace_pid == p.pid ? p.host : fmt::format("{}, pid {}", p.host, p.pid);
  return p.rank >= 0 ? fmt::format("rank {} ({})", p.rank, where) : fmt::format("process ({})", where);
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
      timed_.try_emplace({row.communicator, row.sequence}, std::max<int64_t>(row.gpu_ns, 0));
    });
    read_thread_names();
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

  // Viewers show a thread's id beside its name (Perfetto marks the main thread, whose id is the
  // pid's): the name the thread gave itself (the thread.<TID> facts); the main thread's is "main
  // thread" when not known, another thread the census never saw is shown by its id alone.
  void thread(int64_t tid) {
    if (!tids_.insert(tid).second) return;
    const auto named = thread_names_.find(tid);
    const std::string name = named != thread_names_.end() ? named->second : tid == p_.pid ? "main thread" : "";
    if (!name.empty()) writer_.event(metadata("thread_name", p_.trace_pid, tid, {{"name", name}}));
  }

  void read_thread_names() {
    for (const auto& [key, value] : read_process_facts(db_, p_.id)) {
      if (!key.starts_with(kFactThreadPrefix)) continue;
      int64_t tid = 0;
      const std::string_view digits = std::string_view(key).substr(kFactThreadPrefix.size());
      if (const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), tid);
          error == std::errc() && end == digits.data() + digits.size())
        thread_names_[tid] = value;
    }
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
    // The flow to the GPU slice leaves the call no later than it reaches the slice's middle (the
    // slice starts at the call or later): a viewer reads a flow's points in time order.
    if (cls == ApiClass::Collective)
      if (const std::optional<int64_t> id = host_flow_id({call.object, call.sequence}))
        writer_.event(flow_point("s", *id, kHostToGpuFlow, name, call.tid,
                                 ts + std::min(dur, duration_us(timed_.at({call.object, call.sequence}))) / 2));
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

  // The flow from a collective's host call to the middle of its GPU slice: only for a
  // (communicator, number) this process timed, once (a group's calls share their operation's
  // timing); its id is unique in the trace, one per process and collective.
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
    GpuTrackPlacement placement;
    int64_t track_tid = kGpuTrackBase - 1;
    for_each_timed_collective(db_, p_.id, [&](const TimedCollectiveRow& row) {
      const CollectiveKey key{row.communicator, row.sequence};
      const int64_t gpu_ns = std::max<int64_t>(row.gpu_ns, 0);
      bool new_track = false;
      const int64_t start = placement.place(row, &new_track);
      if (new_track) {
        ++track_tid;
        writer_.event(metadata("thread_name", p_.trace_pid, track_tid, {{"name", "GPU collectives " + hex(key.comm)}}));
        writer_.event(metadata("thread_sort_index", p_.trace_pid, track_tid, {{"sort_index", track_tid}}));
      }
      seen(start, start + gpu_ns);

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
                         {"args", {{"communicator", hex(key.comm)}, {"bytes", row.bytes}}}});
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
      const double middle = ts + dur / 2;
      if (host_flows_.count(key))
        writer_.event(flow_point("f", info->second.flow_id * int64_t(process_count_) + ordinal_, kHostToGpuFlow, name,
                                 track_tid, middle));
      // One flow point per process and (communicator, sequence), inside the slice it binds to,
      // from the earliest point to the latest.
      const CollectiveInfo& c = info->second;
      if (c.first && *c.first != *c.last) {
        const FlowPoint here{2 * start + gpu_ns, ordinal_};
        const char* phase = here == c.first ? "s" : here == c.last ? "f" : "t";
        writer_.event(
            flow_point(phase, c.flow_id, "collective", fmt::format("{} #{}", name, key.sequence), track_tid, middle));
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
    std::map<int64_t, int64_t> stream_end;  // by track: the end of its last slice
    for_each_gpu_activity(db_, p_.id, [&](const GpuActivityRow& row) {
      const int64_t start = row.start_ns, end = row.end_ns, device = row.device;
      const int64_t tid = stream_tids.at({device, row.stream});
      const std::optional<ApiClass> cls = names_.api(row.api).api_class;
      seen(start, end);
      busy.add(device, start, end, &gaps);
      for (const GpuBusyUnion::Gap& gap : gaps) gap_slices(idle_tids.at(gap.device), gap, offs);
      gaps.clear();

      // One stream runs one thing at a time, but its records, put on the host's clock, can start a
      // few ns before the previous one ended: viewers drop a slice that overlaps its neighbour
      // without nesting in it (Perfetto: slice_drop_overlapping_complete_event), so it is drawn
      // from that end.
      auto [last, fresh] = stream_end.try_emplace(tid, end);
      const int64_t drawn_from = !fresh && start < last->second && end > last->second ? last->second : start;
      last->second = std::max(last->second, end);

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
                         {"tid", tid},
                         {"ts", us(drawn_from)},
                         {"dur", duration_us(end - drawn_from)},
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
  std::unordered_map<CollectiveKey, int64_t, CollectiveKeyHash> timed_;  // its timed collectives' GPU ns
  std::unordered_set<CollectiveKey, CollectiveKeyHash> host_flows_;      // those whose call starts a flow
  int64_t first_ns_ = std::numeric_limits<int64_t>::max(), last_ns_ = std::numeric_limits<int64_t>::min();
  std::unordered_set<int64_t> tids_;
  std::unordered_map<int64_t, std::string> thread_names_;  // by tid
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

// Each timed collective's end as the trace draws it (GpuTrackPlacement), on the database's clock:
// the latest over its ranks there.
std::unordered_map<CollectiveKey, int64_t, CollectiveKeyHash> collective_ends(const RunDatabase& db) {
  std::unordered_map<CollectiveKey, int64_t, CollectiveKeyHash> ends;
  for (const ProcessRow& process : read_processes(db)) {
    GpuTrackPlacement placement;
    for_each_timed_collective(db, process.id, [&](const TimedCollectiveRow& row) {
      const int64_t end = placement.place(row) + std::max<int64_t>(row.gpu_ns, 0);
      auto [it, fresh] = ends.try_emplace({row.communicator, row.sequence}, end);
      if (!fresh) it->second = std::max(it->second, end);
    });
  }
  return ends;
}

int64_t median(std::vector<int64_t> values) {
  const auto middle = values.begin() + std::ptrdiff_t(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

}  // namespace

std::vector<ClockAlignment> align_clocks(const std::vector<const RunDatabase*>& databases) {
  std::vector<ClockAlignment> out(databases.size());
  if (databases.size() < 2) return out;
  std::vector<std::unordered_map<CollectiveKey, int64_t, CollectiveKeyHash>> ends;
  for (const RunDatabase* db : databases) ends.push_back(collective_ends(*db));
  // From the first database outwards: each round aligns the database sharing the most collectives
  // with one already aligned.
  std::vector<bool> aligned(databases.size(), false);
  aligned[0] = true;
  for (std::size_t round = 1; round < databases.size(); ++round) {
    std::optional<std::size_t> best;
    std::size_t best_to = 0;
    std::vector<int64_t> best_differences;
    for (std::size_t i = 0; i < databases.size(); ++i) {
      if (aligned[i]) continue;
      for (std::size_t j = 0; j < databases.size(); ++j) {
        if (!aligned[j]) continue;
        std::vector<int64_t> differences;  // j's end minus i's, on their own clocks
        for (const auto& [key, end] : ends[i])
          if (const auto other = ends[j].find(key); other != ends[j].end()) differences.push_back(other->second - end);
        if (!best || differences.size() > best_differences.size()) {
          best = i;
          best_to = j;
          best_differences = std::move(differences);
        }
      }
    }
    ClockAlignment& a = out[*best];
    aligned[*best] = true;
    if (best_differences.empty()) {
      const auto mine = read_wall_clock_offset(*databases[*best]), first = read_wall_clock_offset(*databases[0]);
      a.offset_ns = mine && first ? *mine - *first : 0;
      a.aligned_by = "wall clock";
      continue;
    }
    const int64_t offset = median(best_differences);
    std::vector<int64_t> distances;
    for (const int64_t d : best_differences) distances.push_back(d > offset ? d - offset : offset - d);
    a.offset_ns = out[best_to].offset_ns + offset;
    a.aligned_by = "collectives";
    a.collectives = int64_t(best_differences.size());
    a.spread_ns = median(std::move(distances));
  }
  return out;
}

void export_chrome_trace(const std::vector<const RunDatabase*>& databases, std::ostream& out,
                         const std::string& step_name) {
  const std::vector<ClockAlignment> clocks = align_clocks(databases);
  std::vector<TraceProcess> processes;
  for (std::size_t source = 0; source < databases.size(); ++source) {
    const RunDatabase& db = *databases[source];
    for (ProcessRow& row : read_processes(db))
      processes.push_back({row.id, row.pid, row.rank, std::move(row.host), std::move(row.command), row.lost,
                           read_untimed_collectives(db, row.id), &db, source});
  }
  std::sort(processes.begin(), processes.end(), [](const TraceProcess& a, const TraceProcess& b) {
    return std::tuple(a.rank < 0, a.rank, a.pid, a.source, a.id) <
           std::tuple(b.rank < 0, b.rank, b.pid, b.source, b.id);
  });
  std::unordered_map<int64_t, int> sharing;  // processes per pid
  for (const TraceProcess& p : processes) ++sharing[p.pid];
  for (TraceProcess& p : processes)
    p.trace_pid = sharing[p.pid] == 1 ? p.pid : kSharedPidBase + int64_t(p.source) * kSharedPidPerDatabase + p.id;
  std::map<std::pair<std::size_t, int64_t>, uint32_t> ordinal;  // by (source, id)
  for (std::size_t i = 0; i < processes.size(); ++i)
    ordinal.emplace(std::pair{processes[i].source, processes[i].id}, uint32_t(i));
  // The trace's zero: the first call of any database that has one, on the first one's clock.
  std::optional<int64_t> origin;
  for (std::size_t source = 0; source < databases.size(); ++source)
    if (const int64_t first = read_first_call_ns(*databases[source]); first != 0)
      origin = std::min(origin.value_or(std::numeric_limits<int64_t>::max()), first + clocks[source].offset_ns);

  // The pre-passes: per (communicator, sequence), the shortest GPU duration over all ranks, then
  // the earliest and the latest of the ranks' flow points, each where its process's GPU slice will
  // lie (its first timed row of that collective, placed as gpu_collectives places it).
  CollectiveMap collectives;
  for (std::size_t source = 0; source < databases.size(); ++source)
    for_each_collective_gpu_time(*databases[source], [&](const CollectiveGpuRow& row) {
      if (!ordinal.count({source, row.process_id})) return;
      const int64_t gpu_ns = std::max<int64_t>(row.min_gpu_ns, 0);
      auto [it, fresh] = collectives.try_emplace({row.communicator, row.sequence}, CollectiveInfo{gpu_ns, {}, {}, 0});
      if (fresh) it->second.flow_id = int64_t(collectives.size());
      it->second.min_gpu_ns = std::min(it->second.min_gpu_ns, gpu_ns);
    });
  for (std::size_t i = 0; i < processes.size(); ++i) {
    GpuTrackPlacement placement;
    std::optional<CollectiveKey> previous;
    const int64_t offset = clocks[processes[i].source].offset_ns;
    for_each_timed_collective(*processes[i].db, processes[i].id, [&](const TimedCollectiveRow& row) {
      const int64_t start = placement.place(row) + offset;
      const CollectiveKey key{row.communicator, row.sequence};
      if (previous == key) return;
      previous = key;
      const auto it = collectives.find(key);
      if (it == collectives.end()) return;
      const FlowPoint point{2 * start + std::max<int64_t>(row.gpu_ns, 0), uint32_t(i)};
      CollectiveInfo& c = it->second;
      c.first = c.first ? std::min(*c.first, point) : point;
      c.last = c.last ? std::max(*c.last, point) : point;
    });
  }

  TraceWriter writer(out);
  RecentWindow window;
  bool gpu_activities = false;
  for (const RunDatabase* db : databases) {
    const RecentWindow its = read_recent_window(*db);
    window.copies_shown += its.copies_shown;
    window.copies_recorded += its.copies_recorded;
    window.polls_shown += its.polls_shown;
    window.polls_recorded += its.polls_recorded;
    gpu_activities = gpu_activities || has_gpu_activities(*db);
  }
  Json other{{"producer", "trainshim export"},        {"job", databases.front()->meta("job")},
             {"database", databases.front()->path()}, {"window", window_words(window)},
             {"copies_shown", window.copies_shown},   {"copies_recorded", window.copies_recorded},
             {"polls_shown", window.polls_shown},     {"polls_recorded", window.polls_recorded}};
  if (databases.size() > 1) {
    Json nodes = Json::array();
    for (std::size_t source = 0; source < databases.size(); ++source)
      nodes.push_back({{"database", databases[source]->path()},
                       {"clock_offset_ns", clocks[source].offset_ns},
                       {"aligned_by", clocks[source].aligned_by},
                       {"collectives", clocks[source].collectives},
                       {"spread_ns", clocks[source].spread_ns}});
    other["databases"] = std::move(nodes);
  }
  if (gpu_activities)
    other["gpu_idle"] = fmt::format(
        "each device's idle track marks the stretches above {} ms between its kernels, copies and memsets; with a "
        "duty-cycled GPU timeline (TRAINSHIM_GPU_PERIOD_MS) the stretch between two windows is marked 'not recorded' "
        "there, never idle; the causes of the idle time are in `trainshim report`",
        kExportIdleGapNs / 1'000'000);
  writer.open(other);
  for (std::size_t i = 0; i < processes.size(); ++i) {
    const RunDatabase& db = *processes[i].db;
    ProcessExporter(db, db.vocabulary(), collectives, writer,
                    origin.value_or(0) - clocks[processes[i].source].offset_ns, processes[i], uint32_t(i),
                    processes.size(), step_name)
        .run();
  }
  writer.close();
}

}  // namespace trainshim::cli
