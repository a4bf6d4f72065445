#pragma once
// The collector's loop: discover the job's segments, drain them into the database, retire the
// segments of producers that are gone once nothing is left in them.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "clock_calibration.hpp"
#include "database.hpp"
#include "hang_watch.hpp"
#include "ingest.hpp"
#include "metrics_exporter.hpp"
#include "pass_timings.hpp"
#include "process_stacks.hpp"
#include "recent_writer.hpp"
#include "segment_reader.hpp"

namespace trainshim::collector {

inline constexpr uint32_t kDefaultRecentEvents = 20'000;

struct CollectorOptions {
  std::string job;
  std::string database_path;
  std::string launch;  // empty: unknown (see launch_from_environment)
  uid_t uid = 0;
  std::chrono::milliseconds poll{50};
  // Exit once every producer seen is gone and drained and no new one appeared for this long
  // (and, when none was ever seen, once this long passed since start). Zero: run until signalled.
  std::chrono::milliseconds idle_exit{0};
  // The process that stops this collector once its job has ended (`trainshim run`, its parent); 0:
  // none. Once that process is gone (killed: the collector is reparented), idle_exit applies, 10 s
  // when it is zero, so that no collector outlives a killed `trainshim run` and its job.
  pid_t starter = 0;
  // A collective some ranks entered and others not, for this long, is reported as a hang.
  std::chrono::milliseconds hang{120'000};
  // The most recent copies without stacks and polls kept per process in `recent_events` (0: none).
  uint32_t recent_events = kDefaultRecentEvents;
  // How often what the recent window gained is queued for writing while a process runs (written a
  // slice per pass: recent_writer.hpp).
  std::chrono::milliseconds recent_flush{10'000};
  // The most GPU activity records kept per process in `gpu_activities`, the first ones (0: none);
  // the rest are counted in `calls` and in `processes.gpu_records_not_kept`.
  uint64_t gpu_rows = kDefaultGpuRows;
  // The most samples kept per process in `samples`, the first ones (0: none); the rest are counted
  // in `calls` and in `processes.samples_not_kept`.
  uint64_t sample_rows = kDefaultSampleRows;
  // Added to every time stored: tests only (TRAINSHIM_TEST_CLOCK_OFFSET_NS), a node whose clock
  // differs from the others'.
  int64_t test_clock_offset_ns = 0;
  // The trainshim CLI, run as `trainshim metrics` on the database for as long as this collector
  // runs (TRAINSHIM_METRICS is set); empty: none.
  std::string metrics_exporter;
};

class Collector {
 public:
  explicit Collector(CollectorOptions options);
  // Writes what is still held (the recent windows).
  ~Collector();
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;
  // Runs until `stop` is set or the idle rule ends it; always finishes with a last full drain.
  void run(const std::atomic<bool>& stop);
  // One pass: look for new segments (unless told not to), drain every segment; returns the number
  // of records stored.
  enum class Discovery { Look, Skip };
  uint64_t pass(Discovery discovery = Discovery::Look);
  std::size_t live_segments() const { return segments_.size(); }
  // Segments given up because they shrank while being read.
  uint64_t segments_dropped() const { return segments_dropped_; }
  // The job's segments in shared memory as the last pass listed them.
  const std::set<std::string>& listed() const { return listed_; }
  // How long the passes and their parts took so far.
  struct Timings {
    DurationHistogram pass;      // a whole pass
    DurationHistogram cycle;     // from one pass's start to the next's: the pass, the pause, the wait for a core
    DurationHistogram discover;  // listing /dev/shm and opening new segments
    DurationHistogram recent;    // writing slices of the recent windows
    DurationHistogram commit;    // the pass's COMMIT
  };
  const Timings& timings() const { return timings_; }
  // To standard error and to the database's log.
  void report(const std::string& level, const std::string& message);

 private:
  struct Tracked {
    std::unique_ptr<SegmentReader> reader;
    int64_t process_id;
    Database::ProcessCounters totals;  // as last written to its row
    std::unique_ptr<ProcessStacks> stacks;
    std::unique_ptr<ProcessIngest> ingest;
    SegmentReader::Positions positions;  // as last written to segment_positions
  };
  void discover();
  // This pass's aggregates and kept records of `t` into the database.
  void store(Tracked& t);
  // Queues what `t`'s recent window gained.
  void store_recent(Tracked& t);
  // Where reading stopped, with the records read up to there.
  void store_positions(Tracked& t);
  // What the hang watch is told of `t` after a pass: its rank, its sampler, its main thread.
  void note_process(const Tracked& t, const Database::ProcessCounters& counters);
  // The words of a process's Python stack, for hang messages.
  StackWords stack_words(int64_t process_id, uint32_t python_stack);
  void watch_hangs();
  // What the metrics exporter said, and whether it exited, into the database's log.
  void forward_exporter_messages();
  // How long the collector waits, idle with no producer, before it exits (0: until signalled).
  std::chrono::milliseconds idle_exit_now() const;

  CollectorOptions options_;
  Database database_;
  RecentWriter recent_writer_{database_};
  ClockCalibration clock_;
  std::map<std::string, Tracked> segments_;
  std::set<std::string> rejected_;  // reported once, then left alone
  std::set<std::string> listed_;    // by the last pass
  HangWatch hangs_;
  uint64_t segments_dropped_ = 0;
  Timings timings_;
  std::optional<std::chrono::steady_clock::time_point> last_pass_began_;
  std::chrono::steady_clock::time_point recent_written_ = std::chrono::steady_clock::now();
  // Last: stopped before the database is closed.
  std::optional<MetricsExporter> exporter_;
};

}  // namespace trainshim::collector
