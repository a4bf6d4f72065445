#include "collector.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <thread>
#include <utility>

#include "trainshim/python_files.hpp"

namespace trainshim::collector {

namespace {
// The highest rate the shim's sampler runs at (TRAINSHIM_SAMPLE_HZ): a header that says more says nothing.
constexpr uint32_t kMostSampleHz = 1000;
}  // namespace

Collector::Collector(CollectorOptions options)
    : options_(std::move(options)),
      database_(options_.database_path, options_.job, options_.launch),
      clock_(options_.test_clock_offset_ns),
      hangs_(std::chrono::duration_cast<std::chrono::nanoseconds>(options_.hang).count()) {
  database_.log("info", fmt::format("collector {} started for job {}", getpid(), options_.job));
  if (!options_.metrics_exporter.empty()) {
    try {
      exporter_.emplace(options_.metrics_exporter, options_.database_path);
      database_.log("info", fmt::format("metrics exporter {} started: {} metrics {}", exporter_->pid(),
                                        options_.metrics_exporter, options_.database_path));
    } catch (const std::exception& e) {
      report("warning", fmt::format("the job's metrics are not exported (TRAINSHIM_METRICS): cannot run {}", e.what()));
    }
  }
  database_.commit();
}

Collector::~Collector() {
  try {
    for (auto& [name, t] : segments_) store_recent(t);
    recent_writer_.write(RecentWriter::kEverything);
    database_.log("info", fmt::format("passes: {}; pass to pass: {}; commits: {}; recent-window slices: {}; "
                                      "discoveries: {}; WAL checkpoints: {}",
                                      timings_.pass.summary(), timings_.cycle.summary(), timings_.commit.summary(),
                                      timings_.recent.summary(), timings_.discover.summary(), database_.checkpoints()));
    database_.commit();
  } catch (const std::exception& e) {
    fmt::print(stderr, "trainshim-collector: error: the recent copies and polls were not written: {}\n", e.what());
  }
}

void Collector::report(const std::string& level, const std::string& message) {
  fmt::print(stderr, "trainshim-collector: {}: {}\n", level, message);
  database_.log(level, message);
}

void Collector::forward_exporter_messages() {
  if (!exporter_) return;
  auto [said, errors, exit] = exporter_->take_messages();
  for (const std::string& line : said) report("info", line);
  for (const std::string& line : errors) report("warning", line);
  if (!exit.empty()) {
    report("warning", exit);
    exporter_.reset();
  }
}

void Collector::discover() {
  const std::vector<std::string> names = list_segments(options_.uid, options_.job);
  listed_ = {names.begin(), names.end()};
  for (const std::string& name : names) {
    if (segments_.count(name) || rejected_.count(name)) continue;
    try {
      auto reader = std::make_unique<SegmentReader>(name);
      // A collector that died (killed, out of memory) left the row of a process still running:
      // this one carries on with it, so that the process is one row whatever happened.
      const std::optional<int64_t> resumed = database_.find_unended_process(name, reader->header());
      const int64_t id = resumed ? *resumed : database_.add_process(name, reader->header());
      // It goes on from where the dead one committed: what that one read after, it never stored.
      if (resumed) {
        SegmentReader::Positions committed{std::vector<uint64_t>(reader->geometry().ring_count, 0), 0};
        for (const auto& [ring, position] : database_.segment_positions(*resumed)) {
          if (ring < committed.rings.size()) committed.rings[ring] = position;
          else if (ring == committed.rings.size()) committed.side = position;
        }
        reader->resume(committed);
        report("info", fmt::format("resumed reading /dev/shm/{} (process row {})", name, id));
      }
      Tracked t{std::move(reader),
                id,
                resumed ? database_.process_counters(id) : Database::ProcessCounters{},
                std::make_unique<ProcessStacks>(database_, id),
                std::make_unique<ProcessIngest>(options_.recent_events, options_.gpu_rows, options_.sample_rows),
                {}};
      if (resumed) {
        t.ingest->recent().restore(database_.recent_events(id));
        for (const Database::StoredModule& m : database_.modules(id))
          t.stacks->restore_module(m.path, m.base, m.build_id);
        for (auto& [string_id, text] : database_.python_strings(id))
          t.stacks->restore_string(string_id, std::move(text));
        database_.restore_timings(id, t.ingest->timings());
        t.ingest->restore_gpu_rows(database_.gpu_activity_rows(id));
        t.ingest->restore_sample_rows(database_.sample_rows(id));
        for (const auto& [tid, now] : database_.threads_now(id)) t.ingest->restore_thread_now(tid, now);
        const std::map<std::string, std::string> facts = database_.facts(id);
        const auto restore_max = [&](const char* key, uint64_t& max) {
          if (const auto it = facts.find(key); it != facts.end())
            std::from_chars(it->second.data(), it->second.data() + it->second.size(), max);
        };
        restore_max("threads_max", t.ingest->census().threads_max);
        restore_max("workers_max", t.ingest->census().workers_max);
      }
      recent_writer_.track(id, t.ingest->recent());
      t.positions = t.reader->positions();
      segments_.emplace(name, std::move(t));
    } catch (const std::exception& e) {
      // A segment that is merely young is tried again on the next pass.
      if (const auto* error = dynamic_cast<const SegmentError*>(&e); error && error->young()) continue;
      rejected_.insert(name);
      report("warning", fmt::format("skipped segment /dev/shm/{}: {}", name, e.what()));
    }
  }
}

uint64_t Collector::pass(Discovery discovery) {
  using clock = std::chrono::steady_clock;
  const clock::time_point began = clock::now();
  if (last_pass_began_) timings_.cycle.add(began - *last_pass_began_);
  last_pass_began_ = began;
  if (discovery == Discovery::Look) {
    discover();
    timings_.discover.add(clock::now() - began);
    forward_exporter_messages();
  }
  clock_.refine();
  uint64_t stored = 0;
  // Segments done with once this pass is committed: their producers are gone, or they shrank.
  std::vector<std::string> finished;
  for (auto it = segments_.begin(); it != segments_.end(); ++it) {
    Tracked& t = it->second;
    SegmentReader& reader = *t.reader;
    const bool gone = !reader.producer_alive();
    const auto side = reader.drain_side([&](const SideRecord& r) { t.stacks->add(r); }, gone);
    ProcessIngest& ingest = *t.ingest;
    const int rank = reader.header().rank;
    auto counts = reader.drain(
        [&](const EventRecord& r) {
          const uint64_t begin_ns = clock_.to_monotonic_ns(reader.header(), r.begin_ticks);
          const ApiClass c = ingest.add(r, begin_ns, clock_.to_monotonic_ns(reader.header(), r.end_ticks));
          if (c == ApiClass::Collective || c == ApiClass::CollectiveTiming || c == ApiClass::GroupEnd ||
              c == ApiClass::CommInit)
            hangs_.observe(rank, r, int64_t(begin_ns), t.stacks->user_frame(r.python_stack));
        },
        gone);
    const uint64_t gpu_not_kept = ingest.gpu_not_kept();
    const uint64_t samples_not_kept = ingest.samples_not_kept();
    store(t);
    stored += counts.records;
    counts.unpublished += side.unpublished;
    counts.malformed += side.malformed + t.stacks->take_malformed_facts();
    // What the collector drained adds up; the producer's own counters are its running totals.
    Database::ProcessCounters drained = t.totals;
    drained.events += counts.records;
    drained.lost_unpublished += counts.unpublished;
    drained.malformed += counts.malformed;
    drained.gpu_records_not_kept += gpu_not_kept;
    drained.samples_not_kept += samples_not_kept;
    if (counts.malformed)
      report("warning", fmt::format("{} malformed records skipped in /dev/shm/{}", counts.malformed, it->first));
    if (reader.truncated()) {
      // Its producer's counters can no longer be read: keep the last ones.
      database_.update_process(t.process_id, drained);
      store_recent(t);
      database_.forget_timings(t.ingest->timings());
      recent_writer_.finish(t.process_id);
      ++segments_dropped_;
      report("warning", fmt::format("dropped segment /dev/shm/{}: it shrank while being read (something running as "
                                    "this user truncated it), {} records stored from it this pass; the rest of that "
                                    "process's records are lost; remove the file once inspected",
                                    it->first, counts.records));
      rejected_.insert(it->first);
      finished.push_back(it->first);
      hangs_.forget_process(t.process_id);
      continue;
    }
    Database::ProcessCounters now = drained;
    now.dropped_ring_full = reader.dropped_ring_full();
    now.dropped_not_ready = reader.dropped_not_ready();
    now.dropped_side_full = reader.dropped_side_full();
    now.untimed_capturing = reader.untimed_capturing();
    now.untimed_no_event = reader.untimed_no_event();
    now.python_stacks = reader.python_stacks();
    now.gpu_records_dropped = reader.gpu_records_dropped();
    now.gpu_timeline = reader.gpu_timeline();
    now.samples_torn = reader.samples_torn();
    now.sampler = reader.sampler();
    const uint32_t hz = reader.sample_hz();
    now.sample_hz = hz <= kMostSampleHz ? hz : 0;
    now.ended = gone;
    if (now != t.totals) {
      database_.update_process(t.process_id, now);
      t.totals = now;
    }
    if (gone) hangs_.forget_process(t.process_id);
    else note_process(t, now);
    // A gone producer's segment is drained in one pass (its slots cannot fill any more).
    if (gone) {
      store_recent(t);
      database_.forget_timings(t.ingest->timings());
      recent_writer_.finish(t.process_id);
      database_.forget_segment_positions(t.process_id);
      finished.push_back(it->first);
    } else {
      store_positions(t);
    }
  }
  if (clock::now() - recent_written_ >= options_.recent_flush) {
    for (auto& [name, t] : segments_) store_recent(t);
    recent_written_ = clock::now();
  }
  if (recent_writer_.queued()) {
    const clock::time_point write = clock::now();
    // A slice while records wait in a live producer's rings for this commit; all once none is left.
    const bool live = finished.size() < segments_.size();
    recent_writer_.write(live ? RecentWriter::kRowsPerPass : RecentWriter::kEverything);
    timings_.recent.add(clock::now() - write);
  }
  watch_hangs();
  const clock::time_point commit = clock::now();
  database_.commit();
  timings_.commit.add(clock::now() - commit);
  // Only what is committed leaves the rings (a collector killed before the commit leaves it all
  // there for the next, which starts from the positions committed with the records).
  for (auto& [name, t] : segments_) t.reader->release();
  for (const std::string& name : finished) {
    const auto it = segments_.find(name);
    if (!it->second.reader->truncated()) it->second.reader->unlink();
    segments_.erase(it);
  }
  timings_.pass.add(clock::now() - began);
  return stored;
}

void Collector::store(Tracked& t) {
  ProcessIngest& ingest = *t.ingest;
  database_.add_pass(t.process_id, ingest);
  const SegmentHeader& header = t.reader->header();
  // CLOCK_REALTIME as the segment's anchors relate it to CLOCK_MONOTONIC.
  const int64_t realtime_offset = int64_t(header.anchor_realtime_ns) - int64_t(header.anchor_monotonic_ns);
  for (const uint32_t tid : ingest.threads_sampled()) {
    const ThreadNow& now = ingest.threads_now().at(tid);
    database_.set_thread_now(t.process_id, tid, now, int64_t(now.at_ns) + realtime_offset);
  }
  if (ingest.census_changed())
    for (const auto& [key, value] : ingest.census().facts())
      database_.set_fact(t.process_id, key, std::to_string(value));
  const ProcessIngest::Activity& last = ingest.last_activity();
  if (ingest.stored() && last.seen) {
    const int rank = t.reader->header().rank;
    hangs_.note_activity(rank >= 0 ? rank : int(last.rank_in_comm), kApis[last.api].name,
                         t.stacks->user_frame(last.python_stack), int64_t(last.begin_ns));
  }
  ingest.clear_pass();
}

void Collector::note_process(const Tracked& t, const Database::ProcessCounters& counters) {
  const SegmentHeader& header = t.reader->header();
  ProcessNow now;
  now.rank = header.rank;
  now.pid = header.pid;
  now.sampled = SamplerState(counters.sampler) == SamplerState::On;
  now.last_record_ns = int64_t(t.ingest->last_record_ns());
  const auto& threads = t.ingest->threads_now();
  if (const auto main = threads.find(uint32_t(header.pid)); main != threads.end()) {
    now.main_sampled = true;
    now.main = main->second;
  }
  hangs_.note_process(t.process_id, now);
}

StackWords Collector::stack_words(int64_t process_id, uint32_t python_stack) {
  StackWords words;
  std::string outermost;
  for (const Database::PythonFrame& f : database_.python_frames(process_id, python_stack)) {
    // As ProcessStacks::user_frame: the innermost frame of the user's code, else the outermost.
    outermost = fmt::format("{}:{} in {}", f.file, f.line, f.function);
    if (words.where.empty() && !is_library_python_frame(f.file, f.function)) words.where = outermost;
    words.frames.push_back(fmt::format("{} ({}:{})", f.function, f.file, f.line));
  }
  if (words.where.empty()) words.where = outermost;
  return words;
}

void Collector::store_positions(Tracked& t) {
  const SegmentReader::Positions now = t.reader->positions();
  for (uint32_t ring = 0; ring < now.rings.size(); ++ring)
    if (now.rings[ring] != t.positions.rings[ring]) database_.set_segment_position(t.process_id, ring, now.rings[ring]);
  if (now.side != t.positions.side) database_.set_segment_position(t.process_id, uint32_t(now.rings.size()), now.side);
  t.positions = now;
}

void Collector::store_recent(Tracked& t) { recent_writer_.queue(t.process_id, t.ingest->recent()); }

void Collector::watch_hangs() {
  const StackNamer namer = [this](int64_t process, uint32_t stack) { return stack_words(process, stack); };
  for (const Hang& h : hangs_.check(int64_t(clock_ns(CLOCK_MONOTONIC)) + clock_.shifted_ns(), namer)) {
    // A hang outside collectives has no communicator.
    const std::string communicator = h.kind == HangKind::Collective ? fmt::format("{:016x}", h.communicator) : "";
    database_.record_hang(communicator, h.sequence, std::string(hang_kind_name(h.kind)), h.op, rank_list(h.waiting),
                          rank_list(h.missing), h.waited_ns, h.message, h.stacks);
    if (h.fresh) report("hang", h.message);
  }
}

std::chrono::milliseconds Collector::idle_exit_now() const {
  constexpr std::chrono::milliseconds kOrphanedIdleExit{10'000};
  if (options_.starter == 0 || getppid() == options_.starter) return options_.idle_exit;
  return options_.idle_exit.count() > 0 ? options_.idle_exit : kOrphanedIdleExit;
}

void Collector::run(const std::atomic<bool>& stop) {
  using clock = std::chrono::steady_clock;
  auto last_activity = clock::now();
  // A pass that stored records is followed at once by the next; an empty one by a pause that
  // doubles from kShortestPause, up to kLongestLivePause while a job's segments are open, else up to
  // the poll interval. Records leave a ring only once committed, and one thread's ring of 16,384
  // records lasts 5 ms at 3 M records/s: a burst after a quiet spell must find the collector awake
  // within a few milliseconds. New segments are looked for once per poll interval: listing
  // /dev/shm on every pass cost an idle job's collector 5 % of a core.
  //
  // Each pass commits, and a commit writes every page it touched: passes of a few hundred records
  // each wrote about 40 KB of log (170 MB/s at 1 M records/s, a checkpoint every 25 ms). A pass that
  // stored fewer records than an eighth of the smallest open ring is followed, at the rate just
  // seen, by a pause until about that many can have come, never longer than kLongestLivePause.
  constexpr std::chrono::microseconds kShortestPause{250};
  constexpr std::chrono::microseconds kLongestLivePause{2000};
  std::chrono::microseconds pause = kShortestPause;
  auto last_discovery = clock::now() - options_.poll;
  auto pass_began = clock::now();
  while (!stop.load()) {
    const bool look = segments_.empty() || clock::now() - last_discovery >= options_.poll;
    if (look) last_discovery = clock::now();
    const auto previous_pass_began = std::exchange(pass_began, clock::now());
    const uint64_t stored = pass(look ? Discovery::Look : Discovery::Skip);
    if (stored || !segments_.empty()) last_activity = clock::now();
    if (const auto idle_exit = idle_exit_now();
        idle_exit.count() > 0 && segments_.empty() && clock::now() - last_activity >= idle_exit)
      break;
    if (stored) {
      pause = kShortestPause;
      uint64_t batch = std::numeric_limits<uint32_t>::max();
      for (const auto& [name, t] : segments_)
        batch = std::min<uint64_t>(batch, t.reader->geometry().smallest_capacity() / 8);
      if (stored < batch) {
        const auto until_batch = (pass_began - previous_pass_began) * double(batch - stored) / double(stored);
        std::this_thread::sleep_for(
            std::min<clock::duration>(std::chrono::duration_cast<clock::duration>(until_batch), kLongestLivePause));
      }
      continue;
    }
    std::this_thread::sleep_for(pause);
    const std::chrono::microseconds longest = segments_.empty() ? options_.poll : kLongestLivePause;
    pause = std::min<std::chrono::microseconds>(pause * 2, longest);
  }
  // Stopped (its job ended, or a signal): the last passes drain what is there. A producer still
  // alive then, such as a torchrun rank in a session of its own that dies a moment after the
  // launcher, gets a short while to end, so that its segment is drained and removed, not left in
  // /dev/shm with no collector to come.
  constexpr std::chrono::seconds kStopGrace{2};
  const auto stopped = clock::now();
  pass();
  while (!segments_.empty() && clock::now() - stopped < kStopGrace) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    pass(Discovery::Skip);
  }
}

}  // namespace trainshim::collector
