#include "syncs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

namespace trainshim::cli {

namespace {

struct Event {
  int64_t tid, stream;
  std::string api, api_class, direction, host_memory;
  int64_t native_id, python_id, blocked_ns;
  bool null_object;
};

// The user's frame of a call: its innermost Python frame outside libraries, else the program's.
SyncSite locate(const SyncShape& shape) {
  SyncSite where;
  if (const int top = top_user_python_frame(shape.python); top >= 0) {
    const auto& f = shape.python[std::size_t(top)];
    where.file = f.file;
    where.line = f.line;
    where.function = f.function;
    where.source = f.source;
  } else if (const int native_top = top_user_native_frame(shape.native); native_top >= 0) {
    const auto& f = shape.native[std::size_t(native_top)];
    where.file = f.file;
    where.line = f.line;
    where.function = f.function.empty() ? f.module : f.function;
  }
  where.python = shape.python;
  where.native = shape.native;
  return where;
}

// Copies from or into pageable memory, grouped by direction and the user's line.
std::vector<SyncSite> pageable_sites(const RunDatabase& db, int64_t process_id) {
  Statement q(db,
              "SELECT d.name, e.native_stack, e.python_stack, count(*), sum(e.bytes), sum(e.end_ns - e.begin_ns) "
              "FROM events e JOIN apis a ON a.id = e.api JOIN directions d ON d.id = e.direction "
              "JOIN host_memories m ON m.id = e.host_memory WHERE e.process_id = ? AND a.class = 'copy' AND "
              "m.name = 'pageable' AND d.name IN ('h2d', 'd2h') GROUP BY d.name, e.native_stack, e.python_stack");
  q.bind(1, process_id);
  std::map<std::tuple<std::string, std::string, std::string, int>, SyncSite> sites;
  while (q.step()) {
    SyncShape shape;
    if (q.integer(1)) shape.native = load_native_stack(db, process_id, q.integer(1));
    if (q.integer(2)) shape.python = load_python_stack(db, process_id, q.integer(2));
    SyncSite where = locate(shape);
    where.in_backward = q.integer(2) && python_stack_borrowed(db, process_id, q.integer(2));
    where.classification.operation = q.text(0) == "h2d" ? "pageable H2D copy" : "pageable D2H copy";
    where.classification.rule = "pageable_copy";
    auto [it, fresh] = sites.try_emplace({where.classification.operation, where.file, where.function, where.line}, where);
    it->second.calls += q.integer(3);
    it->second.bytes += q.integer(4);
    it->second.blocked_ns += q.integer(5);
  }
  std::vector<SyncSite> out;
  for (auto& [key, site] : sites) out.push_back(std::move(site));
  std::stable_sort(out.begin(), out.end(), [](const SyncSite& a, const SyncSite& b) { return a.bytes > b.bytes; });
  return out;
}

}  // namespace

std::vector<NativeFrameView> load_native_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id) {
  std::vector<NativeFrameView> frames;
  Statement q(db, "SELECT module, function, file, line FROM native_frames WHERE process_id = ? AND stack_id = ? "
                  "ORDER BY depth");
  q.bind(1, process_id).bind(2, stack_id);
  while (q.step()) frames.push_back({q.text(0), q.text(1), q.text(2), int(q.integer(3))});
  return frames;
}

std::vector<PythonFrameView> load_python_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id) {
  std::vector<PythonFrameView> frames;
  Statement q(db, "SELECT file, function, source, line FROM python_frames WHERE process_id = ? AND stack_id = ? "
                  "ORDER BY depth");
  q.bind(1, process_id).bind(2, stack_id);
  while (q.step()) frames.push_back({q.text(0), q.text(1), q.text(2), int(q.integer(3))});
  return frames;
}

bool python_stack_borrowed(const RunDatabase& db, int64_t process_id, int64_t stack_id) {
  Statement q(db, "SELECT borrowed FROM python_stacks WHERE process_id = ? AND stack_id = ?");
  q.bind(1, process_id).bind(2, stack_id);
  return q.step() && q.integer(0) != 0;
}

std::string site_identity(const SyncSite& site) {
  // A separator no name or line of code contains; the source without the indentation or the
  // trailing blanks an unrelated edit may change.
  constexpr char kSeparator = '\x1f';
  const auto first = site.source.find_first_not_of(" \t");
  const auto last = site.source.find_last_not_of(" \t\r\n");
  const std::string source = first == std::string::npos ? std::string() : site.source.substr(first, last - first + 1);
  std::string key = site.classification.operation;
  for (const std::string* part : {&site.file, &site.function, &source}) (key += kSeparator) += *part;
  return key;
}

RankSyncs load_syncs(const RunDatabase& db, int64_t process_id, const std::string& step_name) {
  RankSyncs out;
  {
    Statement span(db, "SELECT coalesce(max(end_ns) - min(begin_ns), 0) FROM events WHERE process_id = ?");
    span.bind(1, process_id);
    if (span.step()) out.span_ns = span.integer(0);
  }
  // Every copy too: a wait is named after the copy it follows (memcpy_and_sync).
  Statement q(db,
              "SELECT e.tid, e.stream, a.name, a.class, d.name, m.name, e.native_stack, e.python_stack, "
              "e.end_ns - e.begin_ns, e.object = 0 FROM events e JOIN apis a ON a.id = e.api "
              "JOIN directions d ON d.id = e.direction JOIN host_memories m ON m.id = e.host_memory "
              "WHERE e.process_id = ? AND a.class IN ('sync', 'free', 'poll', 'copy') ORDER BY e.begin_ns");
  q.bind(1, process_id);
  // One site per (operation, user frame); a site counts its waits, or its copies if it has no wait.
  struct Accumulated {
    SyncSite site;
    int64_t waits = 0, copies = 0;
  };
  using SiteKey = std::tuple<std::string, int, std::string, std::string, int>;
  std::map<SiteKey, Accumulated> sites;
  std::map<SiteKey, SyncSite> polls;
  std::map<std::pair<int64_t, int64_t>, SyncShape> shapes;  // by (native, python) stack id
  std::map<int64_t, std::pair<int64_t, int64_t>> last_poll_stacks;  // by thread
  CopyPairing pairing;
  std::map<int64_t, bool> borrowed;  // by python stack id
  StepInput steps;
  // Streamed: a long run's copies are far too many to hold.
  while (q.step()) {
    Event e{q.integer(0), q.integer(1), q.text(2), q.text(3), q.text(4), q.text(5), q.integer(6),
            q.integer(7), q.integer(8), q.integer(9) != 0};
    SyncShape probe;
    probe.api = e.api;
    probe.api_class = e.api_class;
    probe.direction = e.direction;
    probe.host_memory = e.host_memory;
    probe.null_object = e.null_object;
    probe.follows_copy = pairing.observe(e.tid, e.stream, e.api_class, e.direction);
    const bool poll = is_poll(probe);
    if (!poll && !is_sync(probe)) continue;
    if (poll) {
      // The shim takes the stacks of a thread's polls only now and then: the others were made
      // from where the last sampled one was.
      auto& last = last_poll_stacks[e.tid];
      if (e.native_id == 0 && e.python_id == 0) std::tie(e.native_id, e.python_id) = last;
      else last = {e.native_id, e.python_id};
    }
    auto [it, fresh] = shapes.try_emplace({e.native_id, e.python_id});
    SyncShape& shape = it->second;
    if (fresh) {
      if (e.native_id) shape.native = load_native_stack(db, process_id, e.native_id);
      if (e.python_id) shape.python = load_python_stack(db, process_id, e.python_id);
    }
    shape.api = probe.api;
    shape.api_class = probe.api_class;
    shape.direction = probe.direction;
    shape.host_memory = probe.host_memory;
    shape.follows_copy = probe.follows_copy;
    shape.null_object = probe.null_object;
    SyncSite where = locate(shape);
    if (e.python_id) {
      auto [known, fresh_id] = borrowed.try_emplace(e.python_id, false);
      if (fresh_id) known->second = python_stack_borrowed(db, process_id, e.python_id);
      where.in_backward = known->second;
    }
    if (poll) {
      const std::string operation = poll_operation(shape);
      auto [site, first] = polls.try_emplace({operation, 0, where.file, where.function, where.line}, where);
      if (first) {
        site->second.classification = {operation, SyncKind::Explicit, "asks whether the GPU is done without waiting",
                                       "a tight polling loop burns a host core; sleep between polls or wait on an event",
                                       "", "poll"};
      }
      site->second.calls += 1;
      site->second.blocked_ns += e.blocked_ns;
      continue;
    }
    const Classification c = classify(shape);
    auto& acc = sites[{c.operation, int(c.kind), where.file, where.function, where.line}];
    if (acc.waits + acc.copies == 0) {
      acc.site = where;
      acc.site.classification = c;
    }
    acc.site.in_backward = acc.site.in_backward || where.in_backward;
    (e.api_class == "copy" ? acc.copies : acc.waits) += 1;
    acc.site.blocked_ns += e.blocked_ns;
    if (e.api_class != "copy") {
      steps.sync_sites.push_back(where.file.empty() ? where.function : fmt::format("{}:{}", where.file, where.line));
      std::vector<std::string> functions;
      for (const auto& f : shape.python) functions.push_back(f.function);
      steps.sync_functions.push_back(std::move(functions));
    }
  }
  {
    Statement c(db, "SELECT a.name, e.bytes FROM events e JOIN apis a ON a.id = e.api WHERE e.process_id = ? "
                    "AND a.class = 'collective' ORDER BY e.begin_ns");
    c.bind(1, process_id);
    while (c.step()) steps.collectives.push_back(fmt::format("{}/{}", c.text(0), c.integer(1)));
  }
  steps.span_ns = out.span_ns;
  out.steps = find_steps(steps, step_name);

  for (auto& [key, acc] : sites) {
    acc.site.calls = acc.waits ? acc.waits : acc.copies;
    (acc.site.classification.kind == SyncKind::Hidden ? out.hidden : out.explicit_).push_back(std::move(acc.site));
  }
  out.pageable = pageable_sites(db, process_id);
  for (auto& [key, site] : polls) out.polls.push_back(std::move(site));
  std::stable_sort(out.polls.begin(), out.polls.end(),
                   [](const SyncSite& a, const SyncSite& b) { return a.calls > b.calls; });
  for (auto* list : {&out.hidden, &out.explicit_})
    std::stable_sort(list->begin(), list->end(),
                     [](const SyncSite& a, const SyncSite& b) { return a.blocked_ns > b.blocked_ns; });
  return out;
}

}  // namespace trainshim::cli
