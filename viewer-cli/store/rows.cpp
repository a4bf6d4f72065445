#include "store/rows.hpp"

#include <cctype>

namespace trainshim::cli {

std::vector<ProcessRow> read_processes(const RunDatabase& db) {
  std::vector<ProcessRow> out;
  Statement q(db, ("SELECT id, rank, local_rank, world_size, pid, host, command, ended, events, python_version, "
                   "python_stacks_unavailable, gpu_timeline, sampler, sample_hz, " +
                   counter_columns(CounterKind::Lost) + ", " + counter_columns(CounterKind::Gpu) + ", " +
                   counter_columns(CounterKind::Sampler) + " FROM processes")
                      .c_str());
  while (q.step()) {
    ProcessRow p;
    p.id = q.integer(0);
    p.rank = int(q.integer(1));
    p.local_rank = int(q.integer(2));
    p.world_size = int(q.integer(3));
    p.pid = q.integer(4);
    p.host = q.text(5);
    p.command = q.text(6);
    p.ended = q.integer(7) != 0;
    p.events = q.integer(8);
    p.python_version = q.text(9);
    p.python_stacks_unavailable = q.text(10);
    p.gpu_timeline = q.text(11);
    p.sampler = q.text(12);
    p.sample_hz = q.integer(13);
    p.lost = read_lost(q, 14);
    p.gpu_records = read_gpu_counters(q, 14 + kLostCounters);
    p.sampler_counters = read_sampler_counters(q, 14 + kLostCounters + kGpuCounters);
    out.push_back(std::move(p));
  }
  return out;
}

namespace {
bool shows_progress(ApiClass c) {
  return c != ApiClass::Sample && c != ApiClass::ProcessSample && c != ApiClass::GpuWindow;
}
}  // namespace

std::map<int64_t, int64_t> read_last_progress(const RunDatabase& db) {
  std::map<int64_t, int64_t> out;
  // calls.last_end_ns is on the host's CLOCK_MONOTONIC; the segment's anchors convert it.
  Statement q(db, ("SELECT p.id, p.start_realtime_ns + max(c.last_end_ns) - p.start_monotonic_ns FROM calls c "
                   "JOIN processes p ON p.id = c.process_id WHERE c.count > 0 AND c.api IN (SELECT id FROM apis WHERE "
                   "class IN " +
                   api_classes_sql(shows_progress) + ") GROUP BY p.id")
                      .c_str());
  while (q.step()) out.emplace(q.integer(0), q.integer(1));
  return out;
}

std::vector<CopyRow> read_copy_totals(const RunDatabase& db, int64_t process_id) {
  std::vector<CopyRow> out;
  const Vocabulary& names = db.vocabulary();
  Statement q(db,
              ("SELECT direction, host_memory, sum(count), sum(bytes), sum(total_ns) FROM calls WHERE process_id = ? "
               "AND api IN (SELECT id FROM apis WHERE class IN " +
               api_classes_sql(ApiClass::Copy) + ") GROUP BY direction, host_memory ORDER BY direction, host_memory")
                  .c_str());
  q.bind(1, process_id);
  while (q.step())
    out.push_back(
        {names.direction(q.integer(0)), names.host_memory(q.integer(1)), q.integer(2), q.integer(3), q.integer(4)});
  return out;
}

std::vector<SyncRow> read_wait_totals(const RunDatabase& db, int64_t process_id, bool (*keep)(ApiClass)) {
  std::vector<SyncRow> out;
  Statement q(db, ("SELECT a.name, sum(c.count), sum(c.total_ns) FROM calls c JOIN apis a ON a.id = c.api "
                   "WHERE c.process_id = ? AND a.class IN " +
                   api_classes_sql(keep) + " GROUP BY c.api ORDER BY a.name")
                      .c_str());
  q.bind(1, process_id);
  while (q.step()) out.push_back({q.text(0), q.integer(1), q.integer(2)});
  return out;
}

std::vector<CollectiveRow> read_collective_totals(const RunDatabase& db, int64_t process_id) {
  std::vector<CollectiveRow> out;
  Statement q(db, ("SELECT a.name, sum(c.count), sum(c.bytes), sum(c.total_ns) FROM calls c "
                   "JOIN apis a ON a.id = c.api WHERE c.process_id = ? AND a.class IN " +
                   api_classes_sql(ApiClass::Collective) + " GROUP BY c.api ORDER BY a.name")
                      .c_str());
  q.bind(1, process_id);
  while (q.step()) out.push_back({collective_op_name(q.text(0)), q.integer(1), q.integer(2), q.integer(3)});
  return out;
}

std::string collective_op_name(const std::string& api) {
  std::string name = api.starts_with("nccl") ? api.substr(4) : api;
  std::string out;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (std::isupper(static_cast<unsigned char>(c)) && i > 0) out.push_back('_');
    out.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

namespace {

// "0,2,3" -> {0, 2, 3}.
std::vector<int> rank_list(const std::string& list) {
  std::vector<int> out;
  for (std::size_t pos = 0; pos < list.size();) {
    const auto comma = list.find(',', pos);
    out.push_back(std::stoi(list.substr(pos, comma - pos)));
    pos = comma == std::string::npos ? list.size() : comma + 1;
  }
  return out;
}

}  // namespace

std::vector<HangRow> read_hangs(const RunDatabase& db) {
  std::vector<HangRow> out;
  Statement q(db, "SELECT communicator, sequence, op, waiting_ranks, missing_ranks, waited_ns, message, kind, "
                  "stacks FROM hangs ORDER BY detected_unix, communicator, sequence");
  // A kind this build does not know is read as a collective's: its message and stacks say what it is.
  while (q.step())
    out.push_back({q.text(0), q.text(2), q.text(6), q.integer(1), q.integer(5), rank_list(q.text(3)),
                   rank_list(q.text(4)), schema::hang_kind_named(q.text(7)).value_or(schema::HangKind::Collective),
                   q.text(8)});
  return out;
}

std::vector<NativeFrameView> read_native_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id) {
  std::vector<NativeFrameView> frames;
  Statement q(db, "SELECT module, function, file, line FROM native_frames WHERE process_id = ? AND stack_id = ? "
                  "ORDER BY depth");
  q.bind(1, process_id).bind(2, stack_id);
  while (q.step()) frames.push_back({q.text(0), q.text(1), q.text(2), int(q.integer(3))});
  return frames;
}

std::vector<PythonFrameView> read_python_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id) {
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

int64_t read_sample_count(const RunDatabase& db, int64_t process_id) {
  Statement q(db, "SELECT count(*) FROM samples WHERE process_id = ?");
  q.bind(1, process_id);
  return q.step() ? q.integer(0) : 0;
}

std::map<std::string, std::string> read_process_facts(const RunDatabase& db, int64_t process_id) {
  std::map<std::string, std::string> facts;
  Statement q(db, "SELECT key, value FROM process_facts WHERE process_id = ? ORDER BY key");
  q.bind(1, process_id);
  while (q.step()) facts[q.text(0)] = q.text(1);
  return facts;
}

std::vector<SampleRow> read_thread_samples(const RunDatabase& db, int64_t process_id, int64_t tid, int64_t from_ns,
                                           int64_t to_ns) {
  Statement q(db, "SELECT at_ns, state, syscall, python_stack FROM samples WHERE process_id = ? AND at_ns >= ? AND "
                  "at_ns <= ? AND tid = ? ORDER BY at_ns");
  q.bind(1, process_id).bind(2, from_ns).bind(3, to_ns).bind(4, tid);
  std::vector<SampleRow> out;
  while (q.step()) out.push_back({q.integer(0), q.text(1), q.integer(2), q.integer(3)});
  return out;
}

std::vector<GpuIntervalRow> read_gpu_intervals(const RunDatabase& db, int64_t process_id) {
  Statement q(db, "SELECT device, start_ns, end_ns FROM gpu_activities WHERE process_id = ? ORDER BY start_ns");
  q.bind(1, process_id);
  std::vector<GpuIntervalRow> out;
  while (q.step()) out.push_back({q.integer(0), q.integer(1), q.integer(2)});
  return out;
}

void for_each_gpu_activity(const RunDatabase& db, int64_t process_id,
                           const std::function<void(const GpuActivityRow&)>& fn) {
  Statement q(db, "SELECT g.api, g.start_ns, g.end_ns, g.device, g.stream, g.bytes, g.direction, g.host_memory, "
                  "coalesce(s.text, ''), g.correlation FROM gpu_activities g LEFT JOIN python_strings s ON "
                  "s.process_id = g.process_id AND s.id = g.name WHERE g.process_id = ? ORDER BY g.start_ns, g.end_ns");
  q.bind(1, process_id);
  const Vocabulary& names = db.vocabulary();
  GpuActivityRow row;
  while (q.step()) {
    row.api = q.integer(0);
    row.start_ns = q.integer(1);
    row.end_ns = q.integer(2);
    row.device = q.integer(3);
    row.stream = q.integer(4);
    row.bytes = q.integer(5);
    row.direction = names.direction(q.integer(6));
    row.host_memory = names.host_memory(q.integer(7));
    row.name = q.text(8);
    row.correlation = q.integer(9);
    fn(row);
  }
}

std::vector<KernelTotalRow> read_kernel_totals(const RunDatabase& db, int64_t process_id) {
  Statement q(db, ("SELECT coalesce(s.text, ''), count(*), sum(max(g.end_ns - g.start_ns, 0)) FROM gpu_activities g "
                   "LEFT JOIN python_strings s ON s.process_id = g.process_id AND s.id = g.name "
                   "WHERE g.process_id = ? AND g.api IN (SELECT id FROM apis WHERE class IN " +
                   api_classes_sql(ApiClass::GpuKernel) + ") GROUP BY g.name")
                      .c_str());
  q.bind(1, process_id);
  std::vector<KernelTotalRow> out;
  while (q.step()) out.push_back({q.text(0), q.integer(1), q.integer(2)});
  return out;
}

std::vector<StackedCallRow> read_stacked_calls(const RunDatabase& db, int64_t process_id) {
  Statement q(db, ("SELECT begin_ns, python_stack FROM events WHERE process_id = ?1 AND python_stack <> 0 AND "
                   "api NOT IN (SELECT id FROM apis WHERE class IN " +
                   api_classes_sql(ApiClass::Collective) +
                   ") UNION ALL SELECT begin_ns, python_stack FROM recent_events WHERE process_id = ?1 AND "
                   "python_stack <> 0 ORDER BY 1")
                      .c_str());
  q.bind(1, process_id);
  std::vector<StackedCallRow> out;
  while (q.step()) out.push_back({q.integer(0), q.integer(1)});
  return out;
}

UntimedCollectives read_untimed_collectives(const RunDatabase& db, int64_t process_id) {
  Statement q(db, ("SELECT " + counter_columns(CounterKind::Untimed) + " FROM processes WHERE id = ?").c_str());
  q.bind(1, process_id);
  return q.step() ? read_untimed(q, 0) : UntimedCollectives{};
}

int64_t read_operations_in_groups_in_progress(const RunDatabase& db, int64_t process_id, int64_t in_progress_flag) {
  Statement q(db, ("SELECT coalesce(sum(detail), 0) FROM events WHERE process_id = ? AND "
                   "api IN (SELECT id FROM apis WHERE class IN " +
                   api_classes_sql(ApiClass::GroupEnd) + ") AND (flags & ?) <> 0")
                      .c_str());
  q.bind(1, process_id).bind(2, in_progress_flag);
  return q.step() ? q.integer(0) : 0;
}

}  // namespace trainshim::cli
