#include "collector.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <thread>
#include <utility>

namespace trainshim::collector {

Collector::Collector(CollectorOptions options)
    : options_(std::move(options)),
      database_(options_.database_path, options_.job, options_.launch),
      hangs_(std::chrono::duration_cast<std::chrono::nanoseconds>(options_.hang).count()) {
  database_.log("info", fmt::format("collector {} started for job {}", getpid(), options_.job));
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
                std::make_unique<ProcessIngest>(options_.recent_events, options_.gpu_rows),
                {}};
      if (resumed) {
        t.ingest->recent().restore(database_.recent_events(id));
        for (const Database::StoredModule& m : database_.modules(id))
          t.stacks->restore_module(m.path, m.base, m.build_id);
        for (auto& [string_id, text] : database_.python_strings(id))
          t.stacks->restore_string(string_id, std::move(text));
        database_.restore_timings(id, t.ingest->timings());
        t.ingest->restore_gpu_rows(database_.gpu_activity_rows(id));
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
          if (c == ApiClass::Collective || c == ApiClass::CollectiveTiming || c == ApiClass::GroupEnd)
            hangs_.observe(rank, r, int64_t(begin_ns), t.stacks->user_frame(r.python_stack));
        },
        gone);
    const uint64_t gpu_not_kept = ingest.gpu_not_kept();
    store(t);
    stored += counts.records;
    counts.unpublished += side.unpublished;
    counts.malformed += side.malformed;
    // What the collector drained adds up; the producer's own counters are its running totals.
    Database::ProcessCounters drained = t.totals;
    drained.events += counts.records;
    drained.lost_unpublished += counts.unpublished;
    drained.malformed += counts.malformed;
    drained.gpu_records_not_kept += gpu_not_kept;
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
    now.ended = gone;
    if (now != t.totals) {
      database_.update_process(t.process_id, now);
      t.totals = now;
    }
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
  const ProcessIngest::Activity& last = ingest.last_activity();
  if (ingest.stored() && last.seen) {
    const int rank = t.reader->header().rank;
    hangs_.note_activity(rank >= 0 ? rank : int(last.rank_in_comm), kApis[last.api].name,
                         t.stacks->user_frame(last.python_stack), int64_t(last.begin_ns));
  }
  ingest.clear_pass();
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
  for (const Hang& h : hangs_.check(int64_t(clock_ns(CLOCK_MONOTONIC)))) {
    database_.record_hang(fmt::format("{:016x}", h.communicator), h.sequence, "collective", h.op, rank_list(h.waiting),
                          rank_list(h.missing), h.waited_ns, h.message, "");
    if (h.fresh) report("hang", h.message);
  }
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
    if (options_.idle_exit.count() > 0 && segments_.empty() && clock::now() - last_activity >= options_.idle_exit)
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
  pass();
}

}  // namespace trainshim::collector
