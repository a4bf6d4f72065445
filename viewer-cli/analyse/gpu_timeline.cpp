#include "analyse/gpu_timeline.hpp"

#include <algorithm>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "store/call_rows.hpp"
#include "store/rows.hpp"

namespace trainshim::cli {

namespace {

constexpr int64_t kMinimumGapNs = 1'000'000;  // the default threshold: max(1 ms, 5 % of the step)
constexpr std::size_t kGapsListed = 10;
// A graph's instantiation this soon after its capture ends is the capture's (capture_end's own).
constexpr int64_t kInstantiateFollowsNs = 1'000'000;
// cudaErrorStreamCaptureInvalidated: cudaStreamEndCapture's return for a capture a forbidden call
// broke, which ends it.
constexpr int64_t kCaptureInvalidated = 901;
constexpr int64_t kSilenceWithoutSteps = 1'000'000'000;

struct Span {
  int64_t start_ns, end_ns;
};

struct Activity {
  int64_t start_ns, end_ns;
  ApiClass kind;
  Direction direction;
  HostMemory host_memory;
  bool communication;  // an NCCL kernel
};

// A host call recorded one by one, with where the user made it.
struct HostCall {
  int64_t begin_ns, end_ns, tid;
  std::string site;  // "file:line in function"; empty without stacks
  bool pageable = false;
};

// The union of [start, end) spans given in order of start.
std::vector<Span> union_of(const std::vector<Activity>& activities, bool (*keep)(const Activity&)) {
  std::vector<Span> out;
  for (const Activity& a : activities) {
    if (!keep(a)) continue;
    if (!out.empty() && a.start_ns <= out.back().end_ns) out.back().end_ns = std::max(out.back().end_ns, a.end_ns);
    else out.push_back({a.start_ns, a.end_ns});
  }
  return out;
}

// The first of `spans` (disjoint, in order) that ends after `t`.
std::vector<Span>::const_iterator first_ending_after(const std::vector<Span>& spans, int64_t t) {
  return std::lower_bound(spans.begin(), spans.end(), t, [](const Span& s, int64_t at) { return s.end_ns <= at; });
}

// Nanoseconds of `spans` (disjoint, in order) inside [from, to).
int64_t covered(const std::vector<Span>& spans, int64_t from, int64_t to) {
  int64_t ns = 0;
  auto it = first_ending_after(spans, from);
  for (; it != spans.end() && it->start_ns < to; ++it) ns += std::min(it->end_ns, to) - std::max(it->start_ns, from);
  return ns;
}

// The first call of `calls` (in order of begin) that began in [from, to]; nullptr if none.
const HostCall* first_begun(const std::vector<HostCall>& calls, int64_t from, int64_t to) {
  auto it =
      std::lower_bound(calls.begin(), calls.end(), from, [](const HostCall& c, int64_t t) { return c.begin_ns < t; });
  return it != calls.end() && it->begin_ns <= to ? &*it : nullptr;
}

// The last call of `calls` that began in [from, to]; nullptr if none.
const HostCall* last_begun(const std::vector<HostCall>& calls, int64_t from, int64_t to) {
  auto it =
      std::upper_bound(calls.begin(), calls.end(), to, [](int64_t t, const HostCall& c) { return t < c.begin_ns; });
  if (it == calls.begin()) return nullptr;
  --it;
  return it->begin_ns >= from ? &*it : nullptr;
}

// A call of `calls` the host was inside during [from, to); nullptr if none. Calls are short
// next to a step: the ones that began in the gap or in the step before it are looked at.
const HostCall* overlapping(const std::vector<HostCall>& calls, int64_t from, int64_t to, int64_t lookback_ns) {
  auto it = std::lower_bound(calls.begin(), calls.end(), from - lookback_ns,
                             [](const HostCall& c, int64_t t) { return c.begin_ns < t; });
  for (; it != calls.end() && it->begin_ns < to; ++it)
    if (it->end_ns > from) return &*it;
  return nullptr;
}

class Loader {
 public:
  Loader(const RunDatabase& db, int64_t process_id) : db_(db), process_id_(process_id) {}

  std::vector<Activity> activities() {
    const Vocabulary& names = db_.vocabulary();
    std::vector<Activity> out;
    for_each_gpu_activity(db_, process_id_, [&](const GpuActivityRow& row) {
      const std::optional<ApiClass> kind = names.api(row.api).api_class;
      if (row.end_ns < row.start_ns || !kind || !is_gpu_activity(*kind)) return;
      out.push_back({row.start_ns, row.end_ns, *kind, row.direction, row.host_memory,
                     *kind == ApiClass::GpuKernel && row.name.starts_with("nccl")});
    });
    return out;
  }

  // The host's time in each stream capture, in order of begin, with the line that began it: from a
  // cudaStreamBeginCapture's call to the return of the next cudaStreamEndCapture on its stream and
  // thread (CUDA ends a capture on the thread that began it), or of the cudaGraphInstantiateWithFlags
  // that thread calls next, at once (as CUDAGraph::capture_end does; one made later, at a first
  // replay, is not the capture's time). A begin that failed captured nothing; an end that failed
  // left the capture running, unless the capture was invalidated, which ends it all the same. A
  // capture still running when the run was read has no end yet, and no time here.
  std::vector<HostCall> captures() {
    const Vocabulary& names = db_.vocabulary();
    const auto capture = [](ApiClass c) { return c == ApiClass::Capture; };
    // By (stream, thread): cudaStreamPerThread is one handle for every thread's own stream.
    std::map<std::pair<int64_t, int64_t>, HostCall> begun;
    std::map<int64_t, HostCall> ended;  // by thread, until its instantiation
    std::vector<HostCall> out;
    for_each_call_event(db_, process_id_, capture, capture, [&](const CallEventRow& call) {
      const std::string& name = names.api(call.api).name;
      if (name.starts_with("cudaStreamBeginCapture")) {
        if (call.result == 0)
          begun[{call.stream, call.tid}] = {call.begin_ns, call.end_ns, call.tid,
                                            site(call.native_stack, call.python_stack)};
      } else if (name.starts_with("cudaStreamEndCapture")) {
        const auto it = begun.find({call.stream, call.tid});
        if (it == begun.end() || (call.result != 0 && call.result != kCaptureInvalidated)) return;
        it->second.end_ns = call.end_ns;
        if (const auto earlier = ended.find(call.tid); earlier != ended.end())
          out.push_back(std::move(earlier->second));
        ended[call.tid] = std::move(it->second);
        begun.erase(it);
      } else if (const auto it = ended.find(call.tid); it != ended.end() && name.starts_with("cudaGraphInstantiate")) {
        if (call.begin_ns - it->second.end_ns <= kInstantiateFollowsNs) it->second.end_ns = call.end_ns;
        out.push_back(std::move(it->second));
        ended.erase(it);
      }
    });
    for (auto& [tid, capture_of] : ended) out.push_back(std::move(capture_of));
    std::stable_sort(out.begin(), out.end(),
                     [](const HostCall& a, const HostCall& b) { return a.begin_ns < b.begin_ns; });
    return out;
  }

  // The timeline's edges, in order: when it was turned on (true) or off.
  std::vector<std::pair<int64_t, bool>> edges() { return read_gpu_timeline_edges(db_, process_id_); }

  // The process's calls of the classes `keep` selects, from `events` and (copies) `recent_events`,
  // in order of begin; `only` (optional) filters them further.
  std::vector<HostCall> calls(bool (*keep)(ApiClass), bool (*only)(Direction, HostMemory) = nullptr) {
    std::vector<HostCall> out;
    for_each_call_event(db_, process_id_, keep, keep, [&](const CallEventRow& call) {
      if (only && !only(call.direction, call.host_memory)) return;
      out.push_back({call.begin_ns, call.end_ns, call.tid, site(call.native_stack, call.python_stack),
                     call.host_memory == HostMemory::Pageable});
    });
    return out;
  }

 private:
  const std::string& site(int64_t native_id, int64_t python_id) {
    auto [it, fresh] = sites_.try_emplace({native_id, python_id});
    if (fresh && (native_id || python_id)) {
      SyncShape shape;
      if (native_id) shape.native = read_native_stack(db_, process_id_, native_id);
      if (python_id) shape.python = read_python_stack(db_, process_id_, python_id);
      const SyncSite where = user_frame(shape);
      if (!where.file.empty() || !where.function.empty()) it->second = site_location(where);
    }
    return it->second;
  }

  const RunDatabase& db_;
  int64_t process_id_;
  std::map<std::pair<int64_t, int64_t>, std::string> sites_;
};

// The windows the timeline was on, as seen from its records (in a database without its edges):
// stretches of GPU activity that no silence longer than `silence_ns` breaks (the duty cycle's off
// time is such a silence). A window goes on to the first host sync that returned after its last
// activity, within such a silence: the GPU sat idle until the host learned it had finished.
// Without it the last step, which ends at that return, would never be covered. `sync_returns` is
// in order.
std::vector<Span> windows_of(const std::vector<Span>& busy, int64_t silence_ns,
                             const std::vector<int64_t>& sync_returns) {
  std::vector<Span> out;
  for (const Span& s : busy) {
    if (!out.empty() && s.start_ns - out.back().end_ns <= silence_ns) out.back().end_ns = s.end_ns;
    else out.push_back(s);
  }
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto back = std::lower_bound(sync_returns.begin(), sync_returns.end(), out[i].end_ns);
    if (back == sync_returns.end() || *back - out[i].end_ns > silence_ns) continue;
    if (i + 1 < out.size() && *back > out[i + 1].start_ns) continue;
    out[i].end_ns = *back;
  }
  return out;
}

// The windows the timeline was on, from the edges the shim recorded: each on edge to the next off
// edge. A window still on at the end (the process was killed, or runs on) ends as an inferred one
// does (windows_of). A window ends after the last activity that began in it: work launched before
// the off edge is recorded to its end. A window but the first may open on a GPU busy with work
// launched before it, unrecorded: it starts at its first activity, and one with none is left out.
std::vector<Span> recorded_windows(const std::vector<std::pair<int64_t, bool>>& edges, const std::vector<Span>& busy,
                                   int64_t silence_ns, const std::vector<int64_t>& sync_returns) {
  std::vector<Span> out;
  bool open = false;
  int64_t opened = 0;
  for (const auto& [at, on] : edges) {
    if (on && !open) opened = at;
    if (!on && open) out.push_back({opened, at});
    open = on;
  }
  if (open) {
    const auto after = first_ending_after(busy, opened);
    const std::vector<Span> inferred = windows_of({after, busy.end()}, silence_ns, sync_returns);
    out.push_back({opened, inferred.empty() ? opened : std::max(opened, inferred.back().end_ns)});
  }
  std::vector<Span> windows;
  for (Span w : out) {
    auto first = first_ending_after(busy, w.start_ns);
    for (auto it = first; it != busy.end() && it->start_ns < w.end_ns; ++it) w.end_ns = std::max(w.end_ns, it->end_ns);
    if (!windows.empty()) {
      if (first == busy.end() || first->start_ns >= w.end_ns) continue;
      w.start_ns = std::max(w.start_ns, first->start_ns);
    }
    windows.push_back(w);
  }
  return windows;
}

bool in_some(const std::vector<Span>& spans, int64_t from, int64_t to) {
  auto it = std::upper_bound(spans.begin(), spans.end(), from, [](int64_t t, const Span& s) { return t < s.start_ns; });
  if (it == spans.begin()) return false;
  --it;
  return it->start_ns <= from && to <= it->end_ns;
}

struct Classified {
  IdleCause cause = IdleCause::Host;
  std::string site;
  bool pageable_input = false;
  bool input_continued = false;  // a later piece of the step's input: the gap is all loading
};

// `gaps` (in time order) by cause and site, the groups with the most idle time first.
std::vector<IdleGapGroup> group_gaps(const std::vector<IdleGap>& gaps) {
  std::map<std::pair<IdleCause, std::string>, IdleGapGroup> by_key;
  for (const IdleGap& gap : gaps) {
    auto [it, fresh] = by_key.try_emplace({gap.cause, gap.site});
    IdleGapGroup& g = it->second;
    if (fresh) g = {gap.cause, gap.site, 0, 0, gap.duration_ns, gap.duration_ns, 0, gap.step, gap.step};
    g.steps += fresh || gap.step != g.last_step;
    ++g.count;
    g.total_ns += gap.duration_ns;
    g.shortest_ns = std::min(g.shortest_ns, gap.duration_ns);
    g.longest_ns = std::max(g.longest_ns, gap.duration_ns);
    g.last_step = gap.step;
  }
  std::vector<IdleGapGroup> groups;
  for (auto& [key, group] : by_key) groups.push_back(std::move(group));
  std::stable_sort(groups.begin(), groups.end(),
                   [](const IdleGapGroup& a, const IdleGapGroup& b) { return a.total_ns > b.total_ns; });
  return groups;
}

}  // namespace

const char* idle_cause_key(IdleCause cause) {
  constexpr const char* keys[kIdleCauseCount] = {"data_loading", "sync", "pageable_copy", "collective", "host"};
  return keys[int(cause)];
}

const char* idle_cause_words(IdleCause cause) {
  constexpr const char* words[kIdleCauseCount] = {"data loading", "sync", "pageable copy", "collective", "host"};
  return words[int(cause)];
}

std::string gpu_timeline_state_words(const std::string& timeline) {
  if (timeline.empty()) return "not recorded: no GPU timeline was started in this process";
  if (timeline == "off") return "turned off (TRAINSHIM_GPU_TIMELINE=0)";
  if (timeline == "unavailable")
    return "CUPTI could not be loaded (no libcupti.so, or one without what trainshim needs)";
  if (timeline == "taken")
    return "another CUPTI client (torch.profiler, Nsight Systems, Nsight Compute) held CUPTI first: trainshim "
           "left it to them";
  if (timeline == "yielded")
    return "another CUPTI client (torch.profiler, Nsight) started while trainshim held CUPTI: trainshim stepped "
           "aside, its timeline ends there";
  if (timeline == "failed") return "CUPTI returned an error and the timeline stopped";
  return "";
}

std::string gpu_timeline_state_advice(const std::string& timeline) {
  if (timeline == "taken" || timeline == "yielded")
    return "run without torch.profiler or Nsight (or profile with them on their own) to get the GPU timeline; the "
           "rest of the report does not depend on it";
  if (timeline == "unavailable")
    return "install CUPTI (the CUDA toolkit's libcupti.so.13) or set TRAINSHIM_CUPTI to the path of a libcupti.so "
           "that matches the driver";
  if (timeline == "failed")
    return "read the collector's log for CUPTI's error; set TRAINSHIM_CUPTI to a libcupti.so that matches the driver";
  return "";
}

namespace {

// The median of the steps' lengths (0 without steps).
int64_t median_of(std::vector<int64_t> lengths) {
  if (lengths.empty()) return 0;
  std::nth_element(lengths.begin(), lengths.begin() + std::ptrdiff_t(lengths.size() / 2), lengths.end());
  return lengths[lengths.size() / 2];
}

// The windows the timeline was on: those the shim recorded with its edges; in a database without
// them (an older trainshim's), inferred from the activity. An inferred first window opens with the
// recording: it goes back to the host's first call that gave the GPU work (a copy, launch or
// collective) shortly before its first activity, for the GPU was idle until that work reached it.
// A later window opens on a GPU that may have been busy unrecorded, so it starts at its first
// activity.
std::vector<Span> timeline_windows(Loader& load, const std::vector<Span>& busy, int64_t silence_ns,
                                   const RankSyncs& syncs) {
  std::vector<int64_t> sync_returns;
  for (const SyncCall& c : syncs.calls) sync_returns.push_back(c.end_ns);
  std::sort(sync_returns.begin(), sync_returns.end());
  const std::vector<std::pair<int64_t, bool>> edges = load.edges();
  if (!edges.empty()) return recorded_windows(edges, busy, silence_ns, sync_returns);
  std::vector<Span> windows = windows_of(busy, silence_ns, sync_returns);
  if (!windows.empty()) {
    const std::vector<HostCall> enqueues = load.calls(
        [](ApiClass c) { return c == ApiClass::Copy || c == ApiClass::Launch || c == ApiClass::Collective; });
    if (const HostCall* first = first_begun(enqueues, windows.front().start_ns - silence_ns, windows.front().start_ns))
      windows.front().start_ns = first->begin_ns;
  }
  return windows;
}

// Each sync call's bubble: on the GPU timeline, the GPU idle time from its return to the next
// activity; without it, the host's time from its return to its thread's next launch (the GPU had
// nothing queued by that thread then). Either ends at the thread's next sync at the latest: a
// second sync before any new work shares the first one's bubble, not adds to it.
void charge_sync_bubbles(Loader& load, const std::vector<Span>& busy, const std::vector<Span>& windows,
                         RankSyncs& syncs) {
  std::map<int64_t, std::vector<int64_t>> sync_begins;  // by thread, in order
  for (const SyncCall& c : syncs.calls) sync_begins[c.tid].push_back(c.begin_ns);
  auto next_sync = [&](const SyncCall& c) {
    const std::vector<int64_t>& begins = sync_begins[c.tid];
    const auto it = std::upper_bound(begins.begin(), begins.end(), c.begin_ns);
    return it == begins.end() ? std::numeric_limits<int64_t>::max() : *it;
  };
  const bool on_gpu = !busy.empty();
  std::map<int64_t, std::vector<int64_t>> launches;  // by thread, the launches' begins in order
  if (!on_gpu)
    for (const HostCall& l : load.calls([](ApiClass c) { return c == ApiClass::Launch; }))
      launches[l.tid].push_back(l.begin_ns);
  for (const SyncCall& c : syncs.calls) {
    int64_t next_work = 0;
    if (on_gpu) {
      if (!in_some(windows, c.end_ns, c.end_ns)) continue;
      const auto it = first_ending_after(busy, c.end_ns);
      if (it == busy.end()) continue;
      next_work = std::max(it->start_ns, c.end_ns);
    } else {
      const std::vector<int64_t>& thread = launches[c.tid];
      const auto it = std::lower_bound(thread.begin(), thread.end(), c.end_ns);
      if (it == thread.end()) continue;
      next_work = *it;
    }
    SyncSite& site = (c.kind == SiteKind::HiddenSync ? syncs.hidden : syncs.explicit_)[c.site];
    site.bubble_ns += std::max<int64_t>(0, std::min(next_work, next_sync(c)) - c.end_ns);
    ++site.bubble_calls;
    site.bubble_on_gpu = on_gpu;
  }
  rank_by_bubble(syncs);
}

// Why the GPU sat idle in a gap, from what the host was doing then: the step's input upload
// arriving, a sync's return, a pageable copy, a collective call, or the host's own work.
class GapClassifier {
 public:
  GapClassifier(Loader& load, const std::vector<Activity>& activities, const RankSyncs& syncs, int64_t median_step_ns)
      : syncs_(syncs),
        starts_(syncs.steps.starts_ns),
        median_step_ns_(median_step_ns),
        input_copies_(load.calls([](ApiClass c) { return c == ApiClass::Copy; },
                                 [](Direction d, HostMemory) { return d == Direction::HostToDevice; })),
        pageable_copies_(load.calls([](ApiClass c) { return c == ApiClass::Copy; },
                                    [](Direction d, HostMemory m) {
                                      return m == HostMemory::Pageable &&
                                             (d == Direction::HostToDevice || d == Direction::DeviceToHost);
                                    })),
        collectives_(load.calls([](ApiClass c) { return c == ApiClass::Collective; })),
        launches_(load.calls([](ApiClass c) { return c == ApiClass::Launch; })),
        captures_(load.captures()) {
    for (const SyncCall& c : syncs.calls) sync_returns_.emplace_back(c.end_ns, &c);
    std::stable_sort(sync_returns_.begin(), sync_returns_.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const Activity& a : activities)
      if (a.kind == ApiClass::GpuCopy && a.direction == Direction::HostToDevice) gpu_uploads_.push_back(&a);
    for (const HostCall& c : captures_) longest_capture_ns_ = std::max(longest_capture_ns_, c.end_ns - c.begin_ns);
  }

  Classified classify(int64_t from, int64_t to) const {
    Classified c;
    // The step's first input copy starts the GPU's work again; or a copy from the line of the
    // step's copy before it, when the host loads its input piece by piece (each piece's loading
    // before its copy, a blocking copy's return no sync of the user's).
    const HostCall* host = last_begun(input_copies_, from, to);
    const Activity* upload = upload_in(to, to);
    const bool first_input = upload && upload_in(step_start(to), to) == upload;
    c.input_continued = upload && !first_input && continues_input(host, from, to);
    if (first_input || c.input_continued) {
      c.cause = IdleCause::DataLoading;
      if (host) c.site = host->site;
      c.pageable_input = upload->host_memory == HostMemory::Pageable || (host && host->pageable);
      return c;
    }
    const auto returned = std::lower_bound(sync_returns_.begin(), sync_returns_.end(), from,
                                           [](const auto& r, int64_t t) { return r.first < t; });
    if (returned != sync_returns_.end() && returned->first < to) return sync_cause(*returned->second);
    if (const HostCall* copy = overlapping(pageable_copies_, from, to, median_step_ns_)) {
      c.cause = IdleCause::PageableCopy;
      c.site = copy->site;
      return c;
    }
    if (const HostCall* collective = overlapping(collectives_, from, to, median_step_ns_)) {
      c.cause = IdleCause::Collective;
      c.site = collective->site;
      return c;
    }
    if (const HostCall* launch = first_begun(launches_, from, to)) c.site = launch->site;
    return c;
  }

  Classified sync_cause(const SyncCall& call) const {
    Classified c;
    c.cause = IdleCause::Sync;
    c.site = site_location((call.kind == SiteKind::HiddenSync ? syncs_.hidden : syncs_.explicit_)[call.site]);
    return c;
  }

  // The stream captures the host was in during [from, to), in order.
  std::vector<const HostCall*> captures_in(int64_t from, int64_t to) const {
    std::vector<const HostCall*> out;
    auto it = std::lower_bound(captures_.begin(), captures_.end(), from - longest_capture_ns_,
                               [](const HostCall& c, int64_t t) { return c.begin_ns < t; });
    for (; it != captures_.end() && it->begin_ns < to; ++it)
      if (it->end_ns > from) out.push_back(&*it);
    return out;
  }

  // The host recording a graph queues nothing: that idle time is the capture's, charged to its line
  // as the syncs that come with it are (torch.cuda.graph synchronizes before it captures).
  static Classified capture_cause(const HostCall& capture) {
    Classified c;
    c.cause = IdleCause::Sync;
    c.site = capture.site;
    return c;
  }

  // The last sync that returned inside (from, to); nullptr if none.
  const SyncCall* last_return_in(int64_t from, int64_t to) const {
    auto it = std::lower_bound(sync_returns_.begin(), sync_returns_.end(), to,
                               [](const auto& r, int64_t t) { return r.first < t; });
    if (it == sync_returns_.begin()) return nullptr;
    --it;
    return it->first > from ? it->second : nullptr;
  }

 private:
  // Whether the step's input copy before the gap [from, to] came from the line of `host`'s.
  bool continues_input(const HostCall* host, int64_t from, int64_t to) const {
    if (!host || host->site.empty()) return false;
    const HostCall* before = last_begun(input_copies_, step_start(to), from - 1);
    return before && before->site == host->site;
  }
  // The start of the step that holds `t` (the first step's start before it all).
  int64_t step_start(int64_t t) const {
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), t);
    return it == starts_.begin() ? std::numeric_limits<int64_t>::min() : *(it - 1);
  }
  // The earliest GPU H2D copy that started in [from, to], if any.
  const Activity* upload_in(int64_t from, int64_t to) const {
    const auto it = std::lower_bound(gpu_uploads_.begin(), gpu_uploads_.end(), from,
                                     [](const Activity* a, int64_t t) { return a->start_ns < t; });
    return it != gpu_uploads_.end() && (*it)->start_ns <= to ? *it : nullptr;
  }

  const RankSyncs& syncs_;
  const std::vector<int64_t>& starts_;
  int64_t median_step_ns_;
  std::vector<HostCall> input_copies_, pageable_copies_, collectives_, launches_, captures_;
  int64_t longest_capture_ns_ = 0;
  std::vector<std::pair<int64_t, const SyncCall*>> sync_returns_;  // by return
  std::vector<const Activity*> gpu_uploads_;                       // by start
};

// The idle time of the covered steps, by line, and their gaps above the threshold.
struct IdleBySite {
  std::map<std::string, int64_t> input;             // data-loading idle above the threshold, by the upload's line
  std::map<std::string, int64_t> sync;              // sync idle, by the sync's line
  std::map<std::string, int64_t> input_after_sync;  // input idle after a sync's return, by its line
  std::vector<IdleGap> gaps;
};

// Cuts the GPU's busy and idle time into the steps that lie wholly inside a window, the idle
// stretches classified, into `out`.
IdleBySite cut_into_steps(GpuTimelineReport& out, const std::vector<int64_t>& starts, const std::vector<Span>& windows,
                          const std::vector<Span>& busy, const std::vector<Span>& compute,
                          const GapClassifier& classifier, const std::function<int64_t(int64_t)>& threshold_of) {
  IdleBySite idle;
  for (std::size_t k = 0; k + 1 < starts.size(); ++k) {
    const int64_t from = starts[k], to = starts[k + 1];
    if (!in_some(windows, from, to)) continue;
    ++out.covered_steps;
    out.covered_ns += to - from;
    CoveredStep& step = out.steps.emplace_back();
    step.step = int64_t(k);
    step.ns = to - from;
    const int64_t step_busy = covered(busy, from, to);
    step.busy_ns = step_busy;
    step.communication_ns = step_busy - covered(compute, from, to);
    out.busy_ns += step_busy;
    out.communication_ns += step.communication_ns;
    const int64_t threshold = threshold_of(to - from);
    bool data_loading = false;
    auto count = [&](int64_t piece_from, int64_t piece_to, const Classified& c) {
      const int64_t a = std::max(piece_from, from), b = std::min(piece_to, to);
      if (b <= a) return;
      out.idle_by_cause_ns[int(c.cause)] += b - a;
      step.idle_by_cause_ns[int(c.cause)] += b - a;
      if (c.cause == IdleCause::Sync) idle.sync[c.site] += b - a;
      if (b - a < threshold) return;
      ++out.gaps_above_threshold;
      idle.gaps.push_back({int64_t(k), a - from, b - a, c.cause, c.site});
      if (c.cause == IdleCause::DataLoading) {
        data_loading = true;
        out.pageable_input = out.pageable_input || c.pageable_input;
        idle.input[c.site] += b - a;
      }
    };
    // The idle stretches between the busy spans, each classified whole (a gap across the step's
    // start is the same gap on both sides), counted inside the step.
    auto it = first_ending_after(busy, from);
    int64_t idle_from = it != busy.begin() ? std::prev(it)->end_ns : from;
    for (;; ++it) {
      const int64_t idle_to = it == busy.end() ? to : it->start_ns;
      if (std::max(idle_from, from) < std::min(idle_to, to)) {
        const Classified c = classifier.classify(idle_from, idle_to);
        // The host loads the next batch only once its last sync has returned: until then the
        // GPU waited on the sync's wake-up, not on the loader. The rest, to the upload's start on
        // the GPU, is the loading and the upload's own latency: what the input costs.
        const SyncCall* back = c.cause == IdleCause::DataLoading && !c.input_continued
                                   ? classifier.last_return_in(idle_from, idle_to)
                                   : nullptr;
        // A gap that ends with the step's input is the loader's, captures or not (their time is
        // what the host did before loading, as logging is).
        const std::vector<const HostCall*> captures = c.cause == IdleCause::DataLoading
                                                          ? std::vector<const HostCall*>{}
                                                          : classifier.captures_in(idle_from, idle_to);
        if (!captures.empty()) {
          // The host's time in each capture is the capture's; the rest of the gap as it is.
          int64_t at = idle_from;
          for (const HostCall* capture : captures) {
            if (capture->begin_ns > at) count(at, capture->begin_ns, classifier.classify(at, capture->begin_ns));
            at = std::max(at, capture->begin_ns);
            const int64_t until = std::min(capture->end_ns, idle_to);
            count(at, until, GapClassifier::capture_cause(*capture));
            at = std::max(at, until);
          }
          if (at < idle_to) count(at, idle_to, classifier.classify(at, idle_to));
        } else if (back) {
          const Classified after = classifier.sync_cause(*back);
          count(idle_from, back->end_ns, after);
          count(back->end_ns, idle_to, c);
          // The input's time after that sync: what the host did from its return to the upload,
          // loading the batch or work of its own (logging); the step breakdown tells them apart.
          if (const int64_t a = std::max(back->end_ns, from), b = std::min(idle_to, to); b > a) {
            step.input_after_sync_ns += b - a;
            idle.input_after_sync[after.site] += b - a;
          }
        } else {
          count(idle_from, idle_to, c);
        }
      }
      if (it == busy.end() || it->start_ns >= to) break;
      idle_from = it->end_ns;
    }
    out.data_loading_steps += data_loading;
  }
  return idle;
}

// The report's totals, lists and input line from the steps' idle time.
void summarize_idle(GpuTimelineReport& out, IdleBySite idle) {
  for (const int64_t ns : out.idle_by_cause_ns) out.idle_ns += ns;
  out.sync_idle_by_site.assign(idle.sync.begin(), idle.sync.end());
  out.input_after_sync_by_site.assign(idle.input_after_sync.begin(), idle.input_after_sync.end());
  std::stable_sort(out.sync_idle_by_site.begin(), out.sync_idle_by_site.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  out.gap_groups = group_gaps(idle.gaps);
  std::stable_sort(idle.gaps.begin(), idle.gaps.end(),
                   [](const IdleGap& a, const IdleGap& b) { return a.duration_ns > b.duration_ns; });
  if (idle.gaps.size() > kGapsListed) idle.gaps.resize(kGapsListed);
  out.gaps = std::move(idle.gaps);
  int64_t best = -1;
  for (const auto& [site, ns] : idle.input)
    if (!site.empty() && ns > best) {
      out.input_site = site;
      best = ns;
    }
}

}  // namespace

GpuTimelineReport load_gpu_timeline(const RunDatabase& db, int64_t process_id, const std::string& timeline,
                                    RankSyncs& syncs, int64_t idle_gap_ns) {
  GpuTimelineReport out;
  out.timeline = timeline;
  Loader load(db, process_id);
  const std::vector<Activity> activities = load.activities();
  const std::vector<Span> busy = union_of(activities, [](const Activity&) { return true; });
  const std::vector<Span> compute = union_of(activities, [](const Activity& a) { return !a.communication; });

  // The steps, from their starts: step k runs from starts[k] to starts[k + 1].
  const std::vector<int64_t>& starts = syncs.steps.starts_ns;
  std::vector<int64_t> lengths;
  for (std::size_t k = 0; k + 1 < starts.size(); ++k) lengths.push_back(starts[k + 1] - starts[k]);
  const int64_t median_step_ns = median_of(lengths);
  const auto threshold_of = [&](int64_t step_ns) {
    return idle_gap_ns > 0 ? idle_gap_ns : std::max(kMinimumGapNs, step_ns / 20);
  };
  out.gap_threshold_ns = threshold_of(median_step_ns);
  // A step with no GPU activity at all in it is the timeline off (or the job stalled): a silence
  // of two steps splits the windows; without steps, one of a second (the duty cycle's default off
  // time is 18 s).
  const int64_t silence_ns = median_step_ns ? 2 * median_step_ns : kSilenceWithoutSteps;
  const std::vector<Span> windows = timeline_windows(load, busy, silence_ns, syncs);
  charge_sync_bubbles(load, busy, windows, syncs);

  if (!activities.empty()) out.kernels = summarize_kernels(db, process_id);
  if (activities.empty()) {
    out.why_none =
        timeline == "on" || timeline == "yielded" ? "no GPU activity was recorded" : gpu_timeline_state_words(timeline);
    return out;
  }
  if (lengths.empty()) {
    out.why_none = "no steps were found to cut the timeline into";
    return out;
  }
  const GapClassifier classifier(load, activities, syncs, median_step_ns);
  summarize_idle(out, cut_into_steps(out, starts, windows, busy, compute, classifier, threshold_of));
  if (out.covered_steps == 0)
    out.why_none = "no step lay wholly inside a window the GPU timeline was on (TRAINSHIM_GPU_ON_MS of every "
                   "TRAINSHIM_GPU_PERIOD_MS)";
  return out;
}

}  // namespace trainshim::cli
