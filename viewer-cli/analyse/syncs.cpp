#include "analyse/syncs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

namespace trainshim::cli {

SyncSite user_frame(const SyncShape& shape) {
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

namespace {

// Copies from or into pageable memory, grouped by direction and the user's line.
std::vector<SyncSite> pageable_sites(const RunDatabase& db, int64_t process_id) {
  Statement q(db, fmt::format("SELECT c.direction, c.native_stack, c.python_stack, sum(c.count), sum(c.bytes), "
                              "sum(c.total_ns) FROM calls c WHERE c.process_id = ? AND "
                              "c.api IN (SELECT id FROM apis WHERE class IN {}) AND "
                              "c.host_memory IN (SELECT id FROM host_memories WHERE name = '{}') AND "
                              "c.direction IN (SELECT id FROM directions WHERE name IN ('{}', '{}')) "
                              "GROUP BY c.direction, c.native_stack, c.python_stack",
                              api_classes_sql(ApiClass::Copy), host_memory_name(HostMemory::Pageable),
                              direction_name(Direction::HostToDevice), direction_name(Direction::DeviceToHost))
                      .c_str());
  q.bind(1, process_id);
  const Vocabulary& names = db.vocabulary();
  std::map<std::tuple<std::string, std::string, std::string, int>, SyncSite> sites;
  while (q.step()) {
    SyncShape shape;
    if (q.integer(1)) shape.native = read_native_stack(db, process_id, q.integer(1));
    if (q.integer(2)) shape.python = read_python_stack(db, process_id, q.integer(2));
    SyncSite where = user_frame(shape);
    where.in_backward = q.integer(2) && python_stack_borrowed(db, process_id, q.integer(2));
    where.kind = SiteKind::PageableCopy;
    where.copy_direction = names.direction(q.integer(0));
    where.classification.operation =
        where.copy_direction == Direction::HostToDevice ? "pageable H2D copy" : "pageable D2H copy";
    where.classification.rule = "pageable_copy";
    where.classification.key = fmt::format("pageable_copy/{}", direction_name(where.copy_direction));
    auto [it, fresh] =
        sites.try_emplace({where.classification.operation, where.file, where.function, where.line}, where);
    it->second.calls += q.integer(3);
    it->second.bytes += q.integer(4);
    it->second.blocked_ns += q.integer(5);
  }
  std::vector<SyncSite> out;
  for (auto& [key, site] : sites) out.push_back(std::move(site));
  std::stable_sort(out.begin(), out.end(), [](const SyncSite& a, const SyncSite& b) { return a.bytes > b.bytes; });
  return out;
}

// The host's time in copies from pageable memory to the GPU that began within the steps (each is
// kept in `events`, with its stacks).
int64_t pageable_upload_ns_in(const RunDatabase& db, int64_t process_id, const std::vector<int64_t>& starts_ns) {
  if (starts_ns.size() < 2) return 0;
  Statement q(db, fmt::format("SELECT coalesce(sum(end_ns - begin_ns), 0) FROM events WHERE process_id = ? AND "
                              "api IN (SELECT id FROM apis WHERE class IN {}) AND "
                              "host_memory IN (SELECT id FROM host_memories WHERE name = '{}') AND "
                              "direction IN (SELECT id FROM directions WHERE name = '{}') AND "
                              "begin_ns >= ? AND begin_ns < ?",
                              api_classes_sql(ApiClass::Copy), host_memory_name(HostMemory::Pageable),
                              direction_name(Direction::HostToDevice))
                      .c_str());
  q.bind(1, process_id);
  q.bind(2, starts_ns.front());
  q.bind(3, starts_ns.back());
  return q.step() ? q.integer(0) : 0;
}

}  // namespace

bool waits_by_class(ApiClass c) { return is_host_sync(c, Direction::None, HostMemory::Unknown, false); }
bool waits_or_polls(ApiClass c) { return waits_by_class(c) || c == ApiClass::Poll; }
bool may_wait_or_poll(ApiClass c) { return can_host_sync(c) || c == ApiClass::Poll; }

std::string site_location(const SyncSite& site) {
  std::string where = site.file.empty() ? std::string("?") : fmt::format("{}:{}", site.file, site.line);
  if (!site.function.empty()) where += " in " + site.function;
  return where;
}

namespace {

// The operation's name, then the file, the function and the source without the indentation or the
// trailing blanks an unrelated edit may change, joined by a separator no name or line of code contains.
std::string identity_with(const std::string& operation, const SyncSite& site) {
  constexpr char kSeparator = '\x1f';
  const auto first = site.source.find_first_not_of(" \t");
  const auto last = site.source.find_last_not_of(" \t\r\n");
  const std::string source = first == std::string::npos ? std::string() : site.source.substr(first, last - first + 1);
  std::string key = operation;
  for (const std::string* part : {&site.file, &site.function, &source}) (key += kSeparator) += *part;
  return key;
}

}  // namespace

std::string site_identity(const SyncSite& site) { return identity_with(site.classification.key, site); }

std::string worded_site_identity(const SyncSite& site) { return identity_with(site.classification.operation, site); }

RankSyncs load_syncs(const RunDatabase& db, int64_t process_id, const std::string& step_name,
                     std::vector<CollectiveCall> collectives) {
  RankSyncs out;
  {
    Statement span(db, "SELECT coalesce(max(last_end_ns) - min(first_begin_ns), 0) FROM calls WHERE process_id = ?");
    span.bind(1, process_id);
    if (span.step()) out.span_ns = span.integer(0);
  }
  const Vocabulary& names = db.vocabulary();
  std::map<std::pair<int64_t, int64_t>, SyncShape> shapes;  // by (native, python) stack id
  std::map<int64_t, bool> borrowed;                         // by python stack id
  // The stacks of a call and where they put it, loaded once per pair of stack ids.
  auto shape_of = [&](int64_t native_id, int64_t python_id) -> SyncShape& {
    auto [it, fresh] = shapes.try_emplace({native_id, python_id});
    if (fresh) {
      if (native_id) it->second.native = read_native_stack(db, process_id, native_id);
      if (python_id) it->second.python = read_python_stack(db, process_id, python_id);
    }
    return it->second;
  };
  auto in_backward = [&](int64_t python_id) {
    if (!python_id) return false;
    auto [known, fresh] = borrowed.try_emplace(python_id, false);
    if (fresh) known->second = python_stack_borrowed(db, process_id, python_id);
    return known->second;
  };

  // Every aggregate of a wait, a poll or a copy (a blocking copy is a wait too), earliest first:
  // a site shows the stacks of its first call. The collector paired each wait with the copy it
  // follows and gave stackless polls the stacks of their thread's last sampled poll.
  Statement q(db, ("SELECT api, direction, host_memory, native_stack, python_stack, null_object, follows_copy, count, "
                   "total_ns FROM calls WHERE process_id = ? AND api IN (SELECT id FROM apis WHERE class IN " +
                   api_classes_sql(may_wait_or_poll) + ") ORDER BY first_begin_ns")
                      .c_str());
  q.bind(1, process_id);
  // One site per (operation, user frame); a site counts its waits, or its copies if it has no wait.
  struct Accumulated {
    SyncSite site;
    int64_t waits = 0, copies = 0;
  };
  using SiteKey = std::tuple<std::string, int, std::string, std::string, int>;
  std::map<SiteKey, Accumulated> sites;
  std::map<SiteKey, SyncSite> polls;
  // A blocking copy's name, by the native frame that made it and its user frame: the stream sync
  // that frame makes right after it (memcpy_and_sync) is the same operation, whatever the frames'
  // names, when no rule names the sync itself.
  using CallerKey = std::tuple<std::string, std::string, std::string, std::string, int>;
  std::map<CallerKey, Classification> blocking_copies;
  auto caller_of = [](const SyncShape& shape, const SyncSite& where) {
    const NativeFrameView none{};
    const NativeFrameView& caller = shape.native.empty() ? none : shape.native.front();
    return CallerKey{caller.module, caller.function, where.file, where.function, where.line};
  };
  while (q.step()) {
    SyncShape& shape = shape_of(q.integer(3), q.integer(4));
    const Vocabulary::ApiWord& api = names.api(q.integer(0));
    if (!api.api_class) continue;
    shape.api = api.name;
    shape.api_class = *api.api_class;
    shape.direction = names.direction(q.integer(1));
    shape.host_memory = names.host_memory(q.integer(2));
    shape.null_object = q.integer(5) != 0;
    shape.follows_copy = names.direction(q.integer(6));
    const int64_t count = q.integer(7), blocked_ns = q.integer(8);
    const bool poll = is_poll(shape);
    if (!poll && !is_sync(shape)) continue;
    SyncSite where = user_frame(shape);
    where.in_backward = in_backward(q.integer(4));
    if (poll) {
      const std::string operation = poll_operation(shape);
      auto [site, first] = polls.try_emplace({operation, 0, where.file, where.function, where.line}, where);
      if (first) {
        site->second.kind = SiteKind::Poll;
        site->second.classification = {
            operation,
            SyncKind::Explicit,
            "asks whether the GPU is done without waiting",
            "a tight polling loop burns a host core; sleep between polls or wait on an event",
            "",
            "poll",
            "poll/" + shape.api};
      }
      site->second.calls += count;
      site->second.blocked_ns += blocked_ns;
      continue;
    }
    Classification c = classify(shape);
    if (!shape.native.empty()) {
      if (shape.api_class == ApiClass::Copy) {
        blocking_copies.insert_or_assign(caller_of(shape, where), c);
      } else if (shape.follows_copy != Direction::None && c.rule == "unclassified") {
        if (const auto copy = blocking_copies.find(caller_of(shape, where)); copy != blocking_copies.end())
          c = copy->second;
      }
    }
    auto& acc = sites[{c.operation, int(c.kind), where.file, where.function, where.line}];
    if (acc.waits + acc.copies == 0) {
      acc.site = where;
      acc.site.classification = c;
      acc.site.kind = c.kind == SyncKind::Hidden ? SiteKind::HiddenSync : SiteKind::ExplicitSync;
    }
    acc.site.in_backward = acc.site.in_backward || where.in_backward;
    (shape.api_class == ApiClass::Copy ? acc.copies : acc.waits) += count;
    acc.site.blocked_ns += blocked_ns;
  }

  // The waits one by one, in time order, for the steps: a repeating sync site marks a step.
  StepInput steps;
  {
    // cudaFree(nullptr) waits for nothing.
    Statement w(db, ("SELECT native_stack, python_stack, api, object, end_ns FROM events WHERE process_id = ? AND "
                     "api IN (SELECT id FROM apis WHERE class IN " +
                     api_classes_sql(waits_by_class) + ") ORDER BY begin_ns")
                        .c_str());
    w.bind(1, process_id);
    std::map<std::pair<int64_t, int64_t>, StepInput::Sync> interned;  // by (native, python) stack id
    while (w.step()) {
      const std::optional<ApiClass> api_class = names.api(w.integer(2)).api_class;
      if (!api_class || !is_host_sync(*api_class, Direction::None, HostMemory::Unknown, false, w.integer(3) == 0))
        continue;
      const std::pair<int64_t, int64_t> stacks{w.integer(0), w.integer(1)};
      auto [it, fresh] = interned.try_emplace(stacks);
      if (fresh) {
        const SyncShape& shape = shape_of(stacks.first, stacks.second);
        const SyncSite where = user_frame(shape);
        std::vector<std::string> functions;
        for (const auto& f : shape.python) functions.push_back(f.function);
        it->second =
            steps.intern(where.file.empty() ? where.function : fmt::format("{}:{}", where.file, where.line), functions);
      }
      steps.syncs.push_back({it->second.site, it->second.functions, w.integer(4)});
    }
  }
  steps.collectives = std::move(collectives);
  steps.span_ns = out.span_ns;
  out.steps = find_steps(steps, step_name);

  for (auto& [key, acc] : sites) {
    acc.site.calls = acc.waits ? acc.waits : acc.copies;
    (acc.site.kind == SiteKind::HiddenSync ? out.hidden : out.explicit_).push_back(std::move(acc.site));
  }
  out.pageable_copies = pageable_sites(db, process_id);
  out.pageable_upload_ns_in_steps = pageable_upload_ns_in(db, process_id, out.steps.starts_ns);
  for (auto& [key, site] : polls) out.polls.push_back(std::move(site));
  std::stable_sort(out.polls.begin(), out.polls.end(),
                   [](const SyncSite& a, const SyncSite& b) { return a.calls > b.calls; });
  for (auto* list : {&out.hidden, &out.explicit_})
    std::stable_sort(list->begin(), list->end(),
                     [](const SyncSite& a, const SyncSite& b) { return a.blocked_ns > b.blocked_ns; });

  // Each sync call one by one, with its site, for the GPU idle time that follows it.
  std::map<SiteKey, std::pair<SiteKind, std::size_t>> site_index;
  for (auto* list : {&out.hidden, &out.explicit_})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const SyncSite& site = (*list)[i];
      site_index[{site.classification.operation, int(site.classification.kind), site.file, site.function, site.line}] =
          {site.kind, i};
    }
  const std::string columns = "tid, begin_ns, end_ns, api, direction, host_memory, native_stack, python_stack, "
                              "object, follows_copy";
  // A blocking copy is a sync too: copies are kept in recent_events.
  Statement c(db, fmt::format("SELECT {0} FROM events WHERE process_id = ?1 AND api IN (SELECT id FROM apis WHERE "
                              "class IN {1}) UNION SELECT {0} FROM recent_events WHERE process_id = ?1 AND api IN "
                              "(SELECT id FROM apis WHERE class IN {2}) ORDER BY 2, 3",
                              columns, api_classes_sql(can_host_sync), api_classes_sql(ApiClass::Copy))
                      .c_str());
  c.bind(1, process_id);
  using ShapeKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  std::map<ShapeKey, std::optional<std::pair<SiteKind, std::size_t>>> site_of;
  while (c.step()) {
    const ShapeKey key{c.integer(3), c.integer(4), c.integer(5),     c.integer(6),
                       c.integer(7), c.integer(9), c.integer(8) == 0};
    auto [known, fresh] = site_of.try_emplace(key);
    if (fresh) {
      const Vocabulary::ApiWord& api = names.api(c.integer(3));
      if (!api.api_class) continue;
      SyncShape shape = shape_of(c.integer(6), c.integer(7));
      shape.api = api.name;
      shape.api_class = *api.api_class;
      shape.direction = names.direction(c.integer(4));
      shape.host_memory = names.host_memory(c.integer(5));
      shape.null_object = c.integer(8) == 0;
      shape.follows_copy = names.direction(c.integer(9));
      if (is_poll(shape) || !is_sync(shape)) continue;
      const Classification cl = classify(shape);
      const SyncSite where = user_frame(shape);
      const auto found = site_index.find({cl.operation, int(cl.kind), where.file, where.function, where.line});
      if (found != site_index.end()) known->second = found->second;
    }
    if (!known->second) continue;
    out.calls.push_back({c.integer(1), c.integer(2), c.integer(0), known->second->first, known->second->second});
  }
  return out;
}

void rank_by_bubble(RankSyncs& rs) {
  for (SiteKind kind : {SiteKind::HiddenSync, SiteKind::ExplicitSync}) {
    std::vector<SyncSite>& list = kind == SiteKind::HiddenSync ? rs.hidden : rs.explicit_;
    if (std::none_of(list.begin(), list.end(), [](const SyncSite& s) { return s.bubble_calls > 0; })) continue;
    std::vector<std::size_t> order(list.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::pair(list[a].bubble_ns, list[a].blocked_ns) > std::pair(list[b].bubble_ns, list[b].blocked_ns);
    });
    std::vector<std::size_t> moved_to(list.size());
    std::vector<SyncSite> sorted;
    for (std::size_t i = 0; i < order.size(); ++i) {
      moved_to[order[i]] = i;
      sorted.push_back(std::move(list[order[i]]));
    }
    list = std::move(sorted);
    for (SyncCall& call : rs.calls)
      if (call.kind == kind) call.site = moved_to[call.site];
  }
}

}  // namespace trainshim::cli
