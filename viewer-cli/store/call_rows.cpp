#include "store/call_rows.hpp"

#include <fmt/format.h>

#include <string>

namespace trainshim::cli {

namespace {

template <class Classes>
std::string apis_of(Classes classes) {
  return "(SELECT id FROM apis WHERE class IN " + api_classes_sql(classes) + ")";
}

}  // namespace

int64_t read_call_span_ns(const RunDatabase& db, int64_t process_id) {
  Statement q(db, "SELECT coalesce(max(last_end_ns) - min(first_begin_ns), 0) FROM calls WHERE process_id = ?");
  q.bind(1, process_id);
  return q.step() ? q.integer(0) : 0;
}

std::vector<CallAggregateRow> read_call_aggregates(const RunDatabase& db, int64_t process_id, bool (*keep)(ApiClass)) {
  Statement q(db, ("SELECT api, direction, host_memory, native_stack, python_stack, null_object, follows_copy, count, "
                   "bytes, total_ns FROM calls WHERE process_id = ? AND api IN " +
                   apis_of(keep) + " ORDER BY first_begin_ns")
                      .c_str());
  q.bind(1, process_id);
  const Vocabulary& names = db.vocabulary();
  std::vector<CallAggregateRow> out;
  while (q.step())
    out.push_back({q.integer(0), names.direction(q.integer(1)), names.host_memory(q.integer(2)), q.integer(3),
                   q.integer(4), q.integer(5) != 0, names.direction(q.integer(6)), q.integer(7), q.integer(8),
                   q.integer(9)});
  return out;
}

void for_each_call_event(const RunDatabase& db, int64_t process_id, bool (*from_events)(ApiClass),
                         bool (*from_recent)(ApiClass), const std::function<void(const CallEventRow&)>& fn) {
  constexpr const char* kColumns =
      "tid, begin_ns, end_ns, api, direction, host_memory, native_stack, python_stack, object, follows_copy, stream, "
      "result";
  std::string sql =
      fmt::format("SELECT {} FROM events WHERE process_id = ?1 AND api IN {}", kColumns, apis_of(from_events));
  if (from_recent)
    sql += fmt::format(" UNION SELECT {} FROM recent_events WHERE process_id = ?1 AND api IN {}", kColumns,
                       apis_of(from_recent));
  sql += " ORDER BY 2, 3";
  Statement q(db, sql.c_str());
  q.bind(1, process_id);
  const Vocabulary& names = db.vocabulary();
  CallEventRow row;
  while (q.step()) {
    row.tid = q.integer(0);
    row.begin_ns = q.integer(1);
    row.end_ns = q.integer(2);
    row.api = q.integer(3);
    row.direction = names.direction(q.integer(4));
    row.host_memory = names.host_memory(q.integer(5));
    row.native_stack = q.integer(6);
    row.python_stack = q.integer(7);
    row.object = q.integer(8);
    row.follows_copy = names.direction(q.integer(9));
    row.stream = q.integer(10);
    row.result = q.integer(11);
    fn(row);
  }
}

std::vector<std::pair<int64_t, bool>> read_gpu_timeline_edges(const RunDatabase& db, int64_t process_id) {
  const Vocabulary& names = db.vocabulary();
  std::vector<std::pair<int64_t, bool>> out;
  for_each_call_event(
      db, process_id, [](ApiClass c) { return c == ApiClass::GpuWindow; }, nullptr,
      [&](const CallEventRow& edge) {
        out.emplace_back(edge.begin_ns, names.api(edge.api).name == api_info(Api::gpuTimelineOn).name);
      });
  return out;
}

namespace {

constexpr const char* kCollectiveColumns =
    "process_id, api, begin_ns, bytes, flags, object, rank_in_comm, comm_size, peer, sequence, gpu_ns, exchange";

void collective_rows(Statement& q, const std::function<void(const CollectiveEventRow&)>& fn) {
  CollectiveEventRow row;
  while (q.step()) {
    row.process_id = q.integer(0);
    row.api = q.integer(1);
    row.begin_ns = q.integer(2);
    row.bytes = q.integer(3);
    row.flags = q.integer(4);
    row.communicator = q.integer(5);
    row.rank_in_comm = q.integer(6);
    row.comm_size = q.integer(7);
    row.peer = q.integer(8);
    row.sequence = q.integer(9);
    row.gpu_ns = q.is_null(10) ? std::nullopt : std::optional<int64_t>(q.integer(10));
    row.exchange = q.integer(11);
    fn(row);
  }
}

}  // namespace

void for_each_collective_event(const RunDatabase& db, const std::function<void(const CollectiveEventRow&)>& fn) {
  Statement q(db, fmt::format("SELECT {} FROM events NOT INDEXED WHERE api IN {}", kCollectiveColumns,
                              apis_of(ApiClass::Collective))
                      .c_str());
  collective_rows(q, fn);
}

void for_each_collective_event(const RunDatabase& db, int64_t process_id,
                               const std::function<void(const CollectiveEventRow&)>& fn) {
  Statement q(db, fmt::format("SELECT {} FROM events WHERE process_id = ?1 AND api IN {}", kCollectiveColumns,
                              apis_of(ApiClass::Collective))
                      .c_str());
  q.bind(1, process_id);
  collective_rows(q, fn);
}

}  // namespace trainshim::cli
