#include "analyse/host.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "analyse/syncs.hpp"
#include "store/rows.hpp"
#include "store/thread_words.hpp"
#include "trainshim/python_files.hpp"

namespace trainshim::cli {

namespace {

// PyTorch's DataLoader iterator (torch/utils/data/dataloader.py): next(it) is
// _BaseDataLoaderIter.__next__, which calls self._next_data(); with workers that is
// _MultiProcessingDataLoaderIter._next_data -> _get_data -> _try_get_data, which blocks in
// self._data_queue.get(timeout=...) until a worker (or the pin-memory thread) hands a batch over.
// Without workers, _SingleProcessDataLoaderIter._next_data loads the batch itself.
constexpr std::string_view kDataLoaderFile = "torch/utils/data/dataloader.py";
constexpr std::string_view kIteratorNext = "__next__";
constexpr std::string_view kQueueWait = "_try_get_data";

bool in_dataloader(const PythonFrameView& f) { return f.file.ends_with(kDataLoaderFile); }

// What a stored Python stack tells: whether it waits for the DataLoader, and where.
struct StackTraits {
  bool input_wait = false;
  bool queue_wait = false;
  std::string caller;          // "file:line in function" that called next(); empty: not known
  std::string file, function;  // its innermost user frame (top_user_python_frame); empty: no frames
  int line = 0;
};

StackTraits traits_of(const std::vector<PythonFrameView>& frames) {
  StackTraits t;
  // Innermost first: the outermost __next__ of the iterator is the one the user's code called.
  int next_at = -1;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (!in_dataloader(frames[i])) continue;
    if (frames[i].function == kIteratorNext) next_at = int(i);
    if (frames[i].function == kQueueWait) t.queue_wait = true;
  }
  t.input_wait = next_at >= 0;
  if (!t.input_wait) t.queue_wait = false;
  if (t.input_wait) {
    // The first frame outside dataloader.py that is the user's, else the one that called next().
    const PythonFrameView* caller = nullptr;
    for (std::size_t i = std::size_t(next_at) + 1; i < frames.size(); ++i) {
      if (in_dataloader(frames[i])) continue;
      if (!caller) caller = &frames[i];
      if (!is_library_python_frame(frames[i].file, frames[i].function)) {
        caller = &frames[i];
        break;
      }
    }
    if (caller) t.caller = fmt::format("{}:{} in {}", caller->file, caller->line, caller->function);
  }
  if (const int top = top_user_python_frame(frames); top >= 0) {
    const PythonFrameView& f = frames[std::size_t(top)];
    t.file = f.file;
    t.function = f.function;
    t.line = f.line;
  }
  return t;
}

// The traits of each stack id of one process, loaded once.
class StackCache {
 public:
  StackCache(const RunDatabase& db, int64_t process_id) : db_(db), process_id_(process_id) {}
  const StackTraits& operator()(int64_t stack) {
    auto [it, fresh] = traits_.try_emplace(stack);
    if (fresh && stack) it->second = traits_of(read_python_stack(db_, process_id_, stack));
    return it->second;
  }

 private:
  const RunDatabase& db_;
  int64_t process_id_;
  std::unordered_map<int64_t, StackTraits> traits_;
};

}  // namespace

void load_host(const RunDatabase& db, int64_t process_id, int64_t pid, const Steps& steps, HostReport& host) {
  host.samples = read_sample_count(db, process_id);
  host.facts = read_process_facts(db, process_id);
  if (host.samples == 0) return;
  // The covered steps: step k runs from starts_ns[k] to starts_ns[k + 1], the last one's end is
  // not known.
  const std::vector<int64_t>& starts = steps.starts_ns;
  const bool stepped = starts.size() >= 2;
  InputWait wait;
  if (stepped) {
    wait.steps = int64_t(starts.size() - 1);
    wait.step_ns = (starts.back() - starts.front()) / wait.steps;
  }
  StackCache stacks(db, process_id);
  std::map<std::string, int64_t> callers;
  for (const SampleRow& s :
       read_thread_samples(db, process_id, pid, stepped ? starts.front() : std::numeric_limits<int64_t>::min(),
                           stepped ? starts.back() - 1 : std::numeric_limits<int64_t>::max())) {
    ++wait.samples;
    const StackTraits& t = stacks(s.python_stack);
    if (!t.input_wait) continue;
    ++wait.wait_samples;
    if (t.queue_wait) ++wait.queue_samples;
    if (!t.caller.empty()) ++callers[t.caller];
  }
  // The most frequent caller; between equals, the first in name order.
  int64_t best = 0;
  for (const auto& [caller, n] : callers)
    if (n > best) {
      best = n;
      wait.site = caller;
    }
  if (wait.samples) host.input_wait = wait;
}

std::optional<StragglerDoing> load_straggler_doing(const RunDatabase& db, int64_t process_id, int64_t pid, int rank,
                                                   const std::vector<LateCollective>& late) {
  if (late.empty()) return std::nullopt;
  // The windows merged, so that a sample in two overlapping windows counts once.
  std::vector<std::pair<int64_t, int64_t>> windows;
  for (const LateCollective& l : late) windows.emplace_back(l.host_begin_ns - l.lateness_ns, l.host_begin_ns);
  std::sort(windows.begin(), windows.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& w : windows) {
    if (!merged.empty() && w.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, w.second);
    else merged.push_back(w);
  }
  const std::vector<SampleRow> samples =
      read_thread_samples(db, process_id, pid, merged.front().first, merged.back().second);

  StackCache stacks(db, process_id);
  using Frame = std::tuple<std::string, std::string, int>;  // file, function, line
  using Doing = std::pair<std::string, int64_t>;            // state, syscall
  std::map<Frame, std::map<Doing, int64_t>> by_frame;
  std::map<Doing, int64_t> by_doing;
  int64_t total = 0;
  auto window = merged.begin();
  for (const SampleRow& s : samples) {
    while (window != merged.end() && window->second < s.at_ns) ++window;
    if (window == merged.end()) break;
    if (s.at_ns < window->first) continue;
    ++total;
    const Doing doing{s.state, s.syscall};
    ++by_doing[doing];
    const StackTraits& t = stacks(s.python_stack);
    if (!t.function.empty() || !t.file.empty()) ++by_frame[{t.file, t.function, t.line}][doing];
  }
  if (total == 0) return std::nullopt;

  // The most frequent of a map; between equals, the first in key order.
  auto most = [](const std::map<Doing, int64_t>& counts) {
    auto best = counts.begin();
    for (auto it = counts.begin(); it != counts.end(); ++it)
      if (it->second > best->second) best = it;
    return *best;
  };
  StragglerDoing out;
  out.rank = rank;
  out.samples = total;
  if (!by_frame.empty()) {
    auto best = by_frame.begin();
    int64_t best_count = 0;
    for (auto it = by_frame.begin(); it != by_frame.end(); ++it) {
      int64_t n = 0;
      for (const auto& [doing, count] : it->second) n += count;
      if (n > best_count) {
        best = it;
        best_count = n;
      }
    }
    std::tie(out.file, out.function, out.line) = best->first;
    std::tie(out.state, out.syscall) = most(best->second).first;
    out.share = double(best_count) / double(total);
  } else {
    const auto [doing, count] = most(by_doing);
    std::tie(out.state, out.syscall) = doing;
    out.share = double(count) / double(total);
  }
  return out;
}

std::string straggler_doing_words(const StragglerDoing& doing) {
  const std::string what = thread_doing_words(doing.state, doing.syscall);
  if (doing.function.empty() && doing.file.empty())
    return fmt::format("{} ({:.0f} % of samples)", what, 100 * doing.share);
  return fmt::format("in {} at {}:{} ({:.0f} % of samples), {}", doing.function, doing.file, doing.line,
                     100 * doing.share, what);
}

}  // namespace trainshim::cli
