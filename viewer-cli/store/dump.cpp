#include "store/dump.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "store/thread_words.hpp"
#include "text/format.hpp"

namespace trainshim::cli {

std::vector<DumpProcess> load_dump(const RunDatabase& db) {
  std::vector<std::pair<int64_t, DumpProcess>> live;  // by process id
  Statement processes(db, "SELECT id, rank, pid, host FROM processes WHERE ended = 0");
  while (processes.step())
    live.push_back({processes.integer(0), {int(processes.integer(1)), processes.integer(2), processes.text(3), {}, 0}});
  std::vector<DumpProcess> out;
  for (auto& [id, p] : live) {
    Statement q(db, "SELECT tid, state, syscall, python_stack, at_ns - since_ns, at_unix_ns FROM threads_now "
                    "WHERE process_id = ?");
    q.bind(1, id);
    while (q.step()) {
      DumpThread thread{
          q.integer(0), q.integer(0) == p.pid, q.text(1), q.integer(2), double(q.integer(4)) / 1e9, q.integer(5), {}};
      if (const int64_t stack = q.integer(3)) {
        Statement f(db, "SELECT function, file, line FROM python_frames WHERE process_id = ? AND stack_id = ? "
                        "ORDER BY depth");
        f.bind(1, id).bind(2, stack);
        while (f.step()) thread.frames.push_back({f.text(0), f.text(1), int(f.integer(2))});
      }
      p.latest_unix_ns = std::max(p.latest_unix_ns, thread.at_unix_ns);
      p.threads.push_back(std::move(thread));
    }
    std::sort(p.threads.begin(), p.threads.end(), [](const DumpThread& a, const DumpThread& b) {
      return std::make_tuple(!a.main, a.tid) < std::make_tuple(!b.main, b.tid);
    });
    out.push_back(std::move(p));
  }
  std::stable_sort(out.begin(), out.end(), [](const DumpProcess& a, const DumpProcess& b) {
    return std::make_tuple(a.rank < 0, a.rank, a.host, a.pid) < std::make_tuple(b.rank < 0, b.rank, b.host, b.pid);
  });
  return out;
}

std::string render_dump_text(const std::vector<DumpProcess>& processes) {
  std::string out;
  for (const DumpProcess& p : processes) {
    if (!out.empty()) out += "\n";
    if (p.threads.empty()) out += fmt::format("rank {} (pid {}): no sample stored yet\n", rank_label(p.rank), p.pid);
    for (const DumpThread& t : p.threads) {
      out += fmt::format("rank {} (pid {}) thread {}{} {} for {:.1f} s\n", rank_label(p.rank), p.pid, t.tid,
                         t.main ? " (main)" : "", thread_doing_words(t.state, t.syscall), t.for_s);
      for (const DumpFrame& f : t.frames) out += fmt::format("    at {} ({}:{})\n", f.function, f.file, f.line);
    }
  }
  return out;
}

nlohmann::ordered_json render_dump_json(const std::vector<DumpProcess>& processes) {
  auto ranks = nlohmann::ordered_json::array();
  for (const DumpProcess& p : processes) {
    auto threads = nlohmann::ordered_json::array();
    for (const DumpThread& t : p.threads) {
      auto frames = nlohmann::ordered_json::array();
      for (const DumpFrame& f : t.frames)
        frames.push_back({{"function", f.function}, {"file", f.file}, {"line", f.line}});
      threads.push_back({{"tid", t.tid},
                         {"main", t.main},
                         {"state", std::string(stored_state_words(t.state))},
                         {"syscall", syscall_words(t.syscall)},
                         {"for_s", t.for_s},
                         {"frames", frames}});
    }
    ranks.push_back({{"rank", rank_json(p.rank)}, {"pid", p.pid}, {"threads", threads}});
  }
  return {{"format", "trainshim-dump/1"}, {"ranks", ranks}};
}

}  // namespace trainshim::cli
