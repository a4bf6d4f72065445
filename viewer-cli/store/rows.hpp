#pragma once
// The run database's rows that the analyses and the report read, typed: a process with its
// counters, a process's totals per API, its stored stacks, the hangs the collector wrote. What
// reads a run goes through these (or through Statement inside store/), never writes SQL of its own.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "store/counters.hpp"
#include "store/run_database.hpp"
#include "trainshim/schema.hpp"

namespace trainshim::cli {

// A recorded process, as `processes` holds it.
struct ProcessRow {
  int64_t id = 0;
  int rank = -1;  // -1: not started by a known launcher
  int local_rank = -1, world_size = -1;
  int64_t pid = 0;
  std::string host, command;
  bool ended = false;
  int64_t events = 0;
  std::string python_version;             // "3.11", "3.13t"; empty: no Python stack was looked for
  std::string python_stacks_unavailable;  // why its Python stacks could not be read; empty if they could
  std::string gpu_timeline;               // how its GPU timeline was taken, or why not
  std::string sampler;                    // its sampler's state
  int64_t sample_hz = 0;
  LostEvents lost;
  GpuRecordCounters gpu_records;
  SamplerCounters sampler_counters;
};

std::vector<ProcessRow> read_processes(const RunDatabase& db);

// When each process last made progress, by its id: the end of its latest record that was not its
// sampler's (a call, a collective's timing, the GPU's activity), as Unix time in nanoseconds. A
// process that recorded nothing else has no entry.
std::map<int64_t, int64_t> read_last_progress(const RunDatabase& db);

// A process's copies per direction and host memory.
struct CopyRow {
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  int64_t calls = 0, bytes = 0, host_ns = 0;
};
std::vector<CopyRow> read_copy_totals(const RunDatabase& db, int64_t process_id);

// A process's calls of one API (its syncs, frees, polls), by name.
struct SyncRow {
  std::string api;
  int64_t calls = 0, blocked_ns = 0;
};
std::vector<SyncRow> read_wait_totals(const RunDatabase& db, int64_t process_id, bool (*keep)(ApiClass));

// A process's calls of one collective API, by name.
struct CollectiveRow {
  std::string op;  // all_reduce, ...
  int64_t calls = 0, bytes = 0, host_ns = 0;
};
std::vector<CollectiveRow> read_collective_totals(const RunDatabase& db, int64_t process_id);

// "all_reduce" for ncclAllReduce.
std::string collective_op_name(const std::string& api);

// A hang the collector detected while the job ran.
struct HangRow {
  std::string communicator, op, message;
  int64_t sequence = 0, waited_ns = 0;
  std::vector<int> waiting, missing;
  schema::HangKind kind = schema::HangKind::Collective;
  std::string stacks;  // the ranks' latest stacks, as the collector wrote them
};
std::vector<HangRow> read_hangs(const RunDatabase& db);

// A stored native frame.
struct NativeFrameView {
  std::string module;    // path of the module, empty if unknown
  std::string function;  // demangled, empty if unknown
  std::string file;
  int line = 0;
};

// A stored Python frame.
struct PythonFrameView {
  std::string file, function, source;
  int line = 0;
};

// A stored stack's frames, innermost first (empty for stack id 0 or an unknown id).
std::vector<NativeFrameView> read_native_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id);
std::vector<PythonFrameView> read_python_stack(const RunDatabase& db, int64_t process_id, int64_t stack_id);
// Whether a stored Python stack was borrowed by an autograd engine thread from the thread blocked in
// backward.
bool python_stack_borrowed(const RunDatabase& db, int64_t process_id, int64_t stack_id);

// The sampler's records of a process: how many, its facts (key -> value), and one thread's samples
// between two times, in time order.
int64_t read_sample_count(const RunDatabase& db, int64_t process_id);
std::map<std::string, std::string> read_process_facts(const RunDatabase& db, int64_t process_id);
struct SampleRow {
  int64_t at_ns = 0;
  std::string state;  // one letter, empty when unknown
  int64_t syscall = -1;
  int64_t python_stack = 0;
};
std::vector<SampleRow> read_thread_samples(const RunDatabase& db, int64_t process_id, int64_t tid, int64_t from_ns,
                                           int64_t to_ns);

// A process's GPU activities (kernels, copies, ...) as intervals, by start.
struct GpuIntervalRow {
  int64_t device = 0, start_ns = 0, end_ns = 0;
};
std::vector<GpuIntervalRow> read_gpu_intervals(const RunDatabase& db, int64_t process_id);
// A process's GPU activity (kernel, copy, memset), its kernel's name as recorded.
struct GpuActivityRow {
  int64_t api = 0, start_ns = 0, end_ns = 0, device = 0, stream = 0, bytes = 0;
  Direction direction = Direction::None;
  HostMemory host_memory = HostMemory::Unknown;
  std::string name;
  int64_t correlation = 0;
};
// A process's GPU activities, by start then end.
void for_each_gpu_activity(const RunDatabase& db, int64_t process_id,
                           const std::function<void(const GpuActivityRow&)>& fn);
// A process's kernels' totals by name (the name's text: one published twice is one kernel).
struct KernelTotalRow {
  std::string name;
  int64_t launches = 0, total_ns = 0;
};
std::vector<KernelTotalRow> read_kernel_totals(const RunDatabase& db, int64_t process_id);

// A process's recorded calls with a Python stack, in begin order, the collectives left out: the
// calls kept one by one (events) and the recent copies and polls (recent_events).
struct StackedCallRow {
  int64_t begin_ns = 0, python_stack = 0;
};
std::vector<StackedCallRow> read_stacked_calls(const RunDatabase& db, int64_t process_id);

// A process's collectives recorded but not timed on the GPU, by cause.
UntimedCollectives read_untimed_collectives(const RunDatabase& db, int64_t process_id);
// The operations of a process's NCCL groups whose end returned ncclInProgress (the group's flag).
int64_t read_operations_in_groups_in_progress(const RunDatabase& db, int64_t process_id, int64_t in_progress_flag);

}  // namespace trainshim::cli
