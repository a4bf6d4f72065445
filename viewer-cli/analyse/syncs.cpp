#include "analyse/syncs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

#include "store/call_rows.hpp"

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

// A process's stored stacks and where they put a call, each loaded once per pair of stack ids.
class StackCache {
 public:
  StackCache(const RunDatabase& db, int64_t process_id) : db_(db), process_id_(process_id) {}

  SyncShape& shape_of(int64_t native_id, int64_t python_id) {
    auto [it, fresh] = shapes_.try_emplace({native_id, python_id});
    if (fresh) {
      if (native_id) it->second.native = read_native_stack(db_, process_id_, native_id);
      if (python_id) it->second.python = read_python_stack(db_, process_id_, python_id);
    }
    return it->second;
  }

  // Whether an autograd engine thread borrowed this Python stack from the thread in backward.
  bool in_backward(int64_t python_id) {
    if (!python_id) return false;
    auto [known, fresh] = borrowed_.try_emplace(python_id, false);
    if (fresh) known->second = python_stack_borrowed(db_, process_id_, python_id);
    return known->second;
  }

  // The call's shape: its API, its copy's direction and memory, its stacks.
  SyncShape shape_of_call(const Vocabulary::ApiWord& api, int64_t native_id, int64_t python_id, Direction direction,
                          HostMemory host_memory, bool null_object, Direction follows_copy) {
    SyncShape shape = shape_of(native_id, python_id);
    shape.api = api.name;
    shape.api_class = *api.api_class;
    shape.direction = direction;
    shape.host_memory = host_memory;
    shape.null_object = null_object;
    shape.follows_copy = follows_copy;
    return shape;
  }

 private:
  const RunDatabase& db_;
  int64_t process_id_;
  std::map<std::pair<int64_t, int64_t>, SyncShape> shapes_;  // by (native, python) stack id
  std::map<int64_t, bool> borrowed_;                         // by python stack id
};

// Copies from or into pageable memory, grouped by direction and the user's line.
std::vector<SyncSite> pageable_sites(const RunDatabase& db, int64_t process_id, StackCache& stacks) {
  std::map<std::tuple<std::string, std::string, std::string, int>, SyncSite> sites;
  for (const CallAggregateRow& row :
       read_call_aggregates(db, process_id, [](ApiClass c) { return c == ApiClass::Copy; })) {
    if (row.host_memory != HostMemory::Pageable ||
        (row.direction != Direction::HostToDevice && row.direction != Direction::DeviceToHost))
      continue;
    SyncSite where = user_frame(stacks.shape_of(row.native_stack, row.python_stack));
    where.in_backward = stacks.in_backward(row.python_stack);
    where.kind = SiteKind::PageableCopy;
    where.copy_direction = row.direction;
    where.classification.operation =
        where.copy_direction == Direction::HostToDevice ? "pageable H2D copy" : "pageable D2H copy";
    where.classification.rule = "pageable_copy";
    where.classification.key = fmt::format("pageable_copy/{}", direction_name(where.copy_direction));
    auto [it, fresh] =
        sites.try_emplace({where.classification.operation, where.file, where.function, where.line}, where);
    it->second.calls += row.count;
    it->second.bytes += row.bytes;
    it->second.blocked_ns += row.total_ns;
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
  int64_t ns = 0;
  for_each_call_event(
      db, process_id, [](ApiClass c) { return c == ApiClass::Copy; }, nullptr,
      [&](const CallEventRow& call) {
        if (call.host_memory == HostMemory::Pageable && call.direction == Direction::HostToDevice &&
            call.begin_ns >= starts_ns.front() && call.begin_ns < starts_ns.back())
          ns += call.end_ns - call.begin_ns;
      });
  return ns;
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

namespace {

// A sync site's key: its operation, its kind and the user's frame.
using SiteKey = std::tuple<std::string, int, std::string, std::string, int>;

// The hidden, explicit and polling sites, from every aggregate of a wait, a poll or a copy (a
// blocking copy is a wait too), earliest first: a site shows the stacks of its first call. The
// collector paired each wait with the copy it follows and gave stackless polls the stacks of their
// thread's last sampled poll. One site per (operation, user frame); a site counts its waits, or its
// copies if it has no wait.
void collect_sites(const RunDatabase& db, int64_t process_id, StackCache& stacks, RankSyncs& out) {
  const Vocabulary& names = db.vocabulary();
  struct Accumulated {
    SyncSite site;
    int64_t waits = 0, copies = 0;
  };
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
  for (const CallAggregateRow& row : read_call_aggregates(db, process_id, may_wait_or_poll)) {
    const Vocabulary::ApiWord& api = names.api(row.api);
    if (!api.api_class) continue;
    const SyncShape shape = stacks.shape_of_call(api, row.native_stack, row.python_stack, row.direction,
                                                 row.host_memory, row.null_object, row.follows_copy);
    const bool poll = is_poll(shape);
    if (!poll && !is_sync(shape)) continue;
    SyncSite where = user_frame(shape);
    where.in_backward = stacks.in_backward(row.python_stack);
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
      site->second.calls += row.count;
      site->second.blocked_ns += row.total_ns;
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
    (shape.api_class == ApiClass::Copy ? acc.copies : acc.waits) += row.count;
    acc.site.blocked_ns += row.total_ns;
  }
  for (auto& [key, acc] : sites) {
    acc.site.calls = acc.waits ? acc.waits : acc.copies;
    (acc.site.kind == SiteKind::HiddenSync ? out.hidden : out.explicit_).push_back(std::move(acc.site));
  }
  for (auto& [key, site] : polls) out.polls.push_back(std::move(site));
  std::stable_sort(out.polls.begin(), out.polls.end(),
                   [](const SyncSite& a, const SyncSite& b) { return a.calls > b.calls; });
  for (auto* list : {&out.hidden, &out.explicit_})
    std::stable_sort(list->begin(), list->end(),
                     [](const SyncSite& a, const SyncSite& b) { return a.blocked_ns > b.blocked_ns; });
}

// The steps, from the waits one by one in time order (a repeating sync site marks a step) and the
// collectives.
Steps steps_of(const RunDatabase& db, int64_t process_id, StackCache& stacks, const std::string& step_name,
               std::vector<CollectiveCall> collectives, int64_t span_ns) {
  const Vocabulary& names = db.vocabulary();
  StepInput steps;
  std::map<std::pair<int64_t, int64_t>, StepInput::Sync> interned;  // by (native, python) stack id
  for_each_call_event(db, process_id, waits_by_class, nullptr, [&](const CallEventRow& wait) {
    // cudaFree(nullptr) waits for nothing.
    const std::optional<ApiClass> api_class = names.api(wait.api).api_class;
    if (!api_class || !is_host_sync(*api_class, Direction::None, HostMemory::Unknown, false, wait.object == 0)) return;
    const std::pair<int64_t, int64_t> ids{wait.native_stack, wait.python_stack};
    auto [it, fresh] = interned.try_emplace(ids);
    if (fresh) {
      const SyncShape& shape = stacks.shape_of(ids.first, ids.second);
      const SyncSite where = user_frame(shape);
      std::vector<std::string> functions;
      for (const auto& f : shape.python) functions.push_back(f.function);
      it->second =
          steps.intern(where.file.empty() ? where.function : fmt::format("{}:{}", where.file, where.line), functions);
    }
    steps.syncs.push_back({it->second.site, it->second.functions, wait.end_ns});
  });
  steps.collectives = std::move(collectives);
  steps.span_ns = span_ns;
  return find_steps(steps, step_name);
}

// Each call of a hidden or explicit site one by one, in time order, with its site: for the GPU's
// idle time that follows it. A blocking copy is a sync too: copies are kept in recent_events.
std::vector<SyncCall> sync_calls(const RunDatabase& db, int64_t process_id, StackCache& stacks, const RankSyncs& out) {
  const Vocabulary& names = db.vocabulary();
  std::map<SiteKey, std::pair<SiteKind, std::size_t>> site_index;
  for (const auto* list : {&out.hidden, &out.explicit_})
    for (std::size_t i = 0; i < list->size(); ++i) {
      const SyncSite& site = (*list)[i];
      site_index[{site.classification.operation, int(site.classification.kind), site.file, site.function, site.line}] =
          {site.kind, i};
    }
  using ShapeKey = std::tuple<int64_t, Direction, HostMemory, int64_t, int64_t, Direction, bool>;
  std::map<ShapeKey, std::optional<std::pair<SiteKind, std::size_t>>> site_of;
  std::vector<SyncCall> calls;
  for_each_call_event(
      db, process_id, can_host_sync, [](ApiClass c) { return c == ApiClass::Copy; },
      [&](const CallEventRow& call) {
        const ShapeKey key{call.api,          call.direction,    call.host_memory, call.native_stack,
                           call.python_stack, call.follows_copy, call.object == 0};
        auto [known, fresh] = site_of.try_emplace(key);
        if (fresh) {
          const Vocabulary::ApiWord& api = names.api(call.api);
          if (!api.api_class) return;
          const SyncShape shape = stacks.shape_of_call(api, call.native_stack, call.python_stack, call.direction,
                                                       call.host_memory, call.object == 0, call.follows_copy);
          if (is_poll(shape) || !is_sync(shape)) return;
          const Classification cl = classify(shape);
          const SyncSite where = user_frame(shape);
          const auto found = site_index.find({cl.operation, int(cl.kind), where.file, where.function, where.line});
          if (found != site_index.end()) known->second = found->second;
        }
        if (!known->second) return;
        calls.push_back({call.begin_ns, call.end_ns, call.tid, known->second->first, known->second->second});
      });
  return calls;
}

}  // namespace

RankSyncs load_syncs(const RunDatabase& db, int64_t process_id, const std::string& step_name,
                     std::vector<CollectiveCall> collectives) {
  RankSyncs out;
  out.span_ns = read_call_span_ns(db, process_id);
  StackCache stacks(db, process_id);
  collect_sites(db, process_id, stacks, out);
  out.steps = steps_of(db, process_id, stacks, step_name, std::move(collectives), out.span_ns);
  out.pageable_copies = pageable_sites(db, process_id, stacks);
  out.pageable_upload_ns_in_steps = pageable_upload_ns_in(db, process_id, out.steps.starts_ns);
  out.calls = sync_calls(db, process_id, stacks, out);
  return out;
}

Steps load_steps(const RunDatabase& db, int64_t process_id, const std::string& step_name,
                 std::vector<CollectiveCall> collectives) {
  StackCache stacks(db, process_id);
  return steps_of(db, process_id, stacks, step_name, std::move(collectives), read_call_span_ns(db, process_id));
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
