#include "render/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "trainshim/version.hpp"

namespace trainshim::cli {

namespace {

using Labels = std::vector<std::pair<std::string_view, std::string>>;

// The upper bounds of trainshim_step_seconds' buckets: a step of a few milliseconds to a minute.
constexpr std::array kStepBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0};

double seconds(int64_t ns) { return double(ns) / 1e9; }

// One exposition: each family's metadata, then its samples. The two formats differ in a counter's
// and an info's metadata name, in UNIT lines and in the closing "# EOF".
class Exposition {
 public:
  explicit Exposition(MetricsFormat format) : open_metrics_(format == MetricsFormat::OpenMetrics) {}

  // type: "counter", "gauge", "histogram" or "info"; unit: the name's last word ("seconds", "bytes",
  // "ratio"), empty when it has none.
  void family(std::string_view name, std::string_view type, std::string_view help, std::string_view unit = "") {
    name_ = name;
    type_ = type;
    std::string typed(name);
    if (!open_metrics_ && type == "counter") typed += "_total";
    if (!open_metrics_ && type == "info") typed += "_info";
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", typed, help, typed,
                   !open_metrics_ && type == "info" ? "gauge" : type);
    if (open_metrics_ && !unit.empty()) fmt::format_to(std::back_inserter(out_), "# UNIT {} {}\n", name, unit);
  }

  // A sample of the family begun last; `suffix`: a histogram's "_bucket", "_sum" or "_count".
  void sample(const Labels& labels, double value, std::string_view suffix = "") {
    out_ += name_;
    if (type_ == "counter") out_ += "_total";
    else if (type_ == "info") out_ += "_info";
    else out_ += suffix;
    if (!labels.empty()) {
      out_ += '{';
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i) out_ += ',';
        out_ += labels[i].first;
        out_ += "=\"";
        append_escaped(labels[i].second);
        out_ += '"';
      }
      out_ += '}';
    }
    fmt::format_to(std::back_inserter(out_), " {}\n", value);
    ++series_;
  }

  std::size_t series() const { return series_; }

  std::string finish() {
    if (open_metrics_) out_ += "# EOF\n";
    return std::move(out_);
  }

 private:
  void append_escaped(std::string_view value) {
    for (const char c : value) {
      if (c == '\\') out_ += "\\\\";
      else if (c == '"') out_ += "\\\"";
      else if (c == '\n') out_ += "\\n";
      else out_ += c;
    }
  }

  bool open_metrics_;
  std::string out_;
  std::string name_, type_;
  std::size_t series_ = 0;
};

Labels with(Labels labels, std::string_view key, std::string value) {
  labels.emplace_back(key, std::move(value));
  return labels;
}

std::string site_label(const SyncSite& site) {
  return fmt::format("{}:{}", site.file.empty() ? "?" : site.file, site.line);
}

// The processes exported: one per (rank, host), the first of each (two processes of one rank on
// one host would be two series with the same labels, which Prometheus refuses).
std::vector<const ProcessReport*> exported_processes(const Report& report) {
  std::vector<const ProcessReport*> out;
  std::set<std::pair<int, std::string>> seen;
  for (const ProcessReport& p : report.processes)
    if (seen.emplace(p.rank, p.host).second) out.push_back(&p);
  return out;
}

Labels process_labels(const Report& report, const ProcessReport& p) {
  return {{"job", report.job},
          {"rank", std::to_string(p.rank)},
          {"local_rank", std::to_string(p.local_rank)},
          {"host", p.host}};
}

void step_histograms(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  e.family("trainshim_step_seconds", "histogram", "Length of each step whose end is known.", "seconds");
  for (const ProcessReport* p : processes) {
    const std::vector<int64_t>& starts = p->sync_sites.steps.starts_ns;
    std::array<int64_t, kStepBuckets.size()> in_bucket{};
    int64_t count = 0, sum_ns = 0;
    for (std::size_t k = 1; k < starts.size(); ++k) {
      const int64_t length = starts[k] - starts[k - 1];
      ++count;
      sum_ns += length;
      for (std::size_t b = 0; b < kStepBuckets.size(); ++b)
        if (seconds(length) <= kStepBuckets[b]) ++in_bucket[b];
    }
    const Labels labels = process_labels(report, *p);
    for (std::size_t b = 0; b < kStepBuckets.size(); ++b)
      e.sample(with(labels, "le", fmt::format("{}", kStepBuckets[b])), double(in_bucket[b]), "_bucket");
    e.sample(with(labels, "le", "+Inf"), double(count), "_bucket");
    e.sample(labels, double(count), "_count");
    e.sample(labels, seconds(sum_ns), "_sum");
  }
}

void progress(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  e.family("trainshim_last_progress_timestamp_seconds", "gauge",
           "Unix time of the rank's latest recorded call, collective or GPU activity (its sampler's aside).");
  for (const ProcessReport* p : processes)
    if (p->last_progress_unix_ns > 0) e.sample(process_labels(report, *p), seconds(p->last_progress_unix_ns));
  e.family("trainshim_process_ended", "gauge", "1 once the rank's process has ended.");
  for (const ProcessReport* p : processes) e.sample(process_labels(report, *p), p->ended ? 1 : 0);
}

void waits(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  const CollectiveAnalysis& a = report.waits.analysis;
  e.family("trainshim_collective_wait_seconds", "counter",
           "GPU time the rank spent in collectives waiting for the rank that arrived last (waited_for).", "seconds");
  for (const ProcessReport* p : processes) {
    const RankWaits* w = a.waits_of(p->rank);
    if (!w || p->rank < 0) continue;
    std::vector<std::pair<int64_t, int32_t>> by_wait;
    for (const auto& [rank, ns] : w->waited_for_ns) by_wait.emplace_back(ns, rank);
    std::sort(by_wait.begin(), by_wait.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    const Labels labels = process_labels(report, *p);
    int64_t rest = 0;
    for (std::size_t i = 0; i < by_wait.size(); ++i) {
      if (i < kMetricsTopWaitedFor)
        e.sample(with(labels, "waited_for", std::to_string(by_wait[i].second)), seconds(by_wait[i].first));
      else rest += by_wait[i].first;
    }
    if (by_wait.size() > kMetricsTopWaitedFor) e.sample(with(labels, "waited_for", "other"), seconds(rest));
  }
  e.family("trainshim_straggler_score", "gauge",
           "How late the rank arrives at its collectives after start-up: 0 first, 1 last, averaged.");
  for (const ProcessReport* p : processes)
    if (const RankWaits* w = a.waits_of(p->rank); w && p->rank >= 0 && w->steady_collectives > 0)
      e.sample(process_labels(report, *p), w->straggler_score());
  // The score of any window, as counters: rate() of the first over rate() of the second.
  e.family("trainshim_collective_lateness", "counter",
           "The rank's arrival lateness at each matched collective (0 first, 1 last), summed: over a window, its "
           "rate() over that of trainshim_collective_arrivals_total is the rank's straggler score then.");
  for (const ProcessReport* p : processes)
    if (const RankWaits* w = a.waits_of(p->rank); w && p->rank >= 0 && w->collectives > 0)
      e.sample(process_labels(report, *p), w->lateness);
  e.family("trainshim_collective_arrivals", "counter",
           "The rank's matched collectives, whose lateness trainshim_collective_lateness_total sums.");
  for (const ProcessReport* p : processes)
    if (const RankWaits* w = a.waits_of(p->rank); w && p->rank >= 0 && w->collectives > 0)
      e.sample(process_labels(report, *p), double(w->collectives));
  e.family("trainshim_straggler_rank", "gauge",
           "The rank whose lateness causes most of the job's collective waits; -1 when there is none.");
  e.sample({{"job", report.job}}, a.straggler);
  e.family("trainshim_collectives_matched", "counter",
           "Collectives recorded on every rank of their communicator, on which the waits are measured.");
  e.sample({{"job", report.job}}, double(a.matched));
}

// Per rank, its (communicator, collective) pairs by GPU time, the first kMetricsTopCommunicatorOps
// named and the rest summed into communicator="other" (no bandwidth: it mixes collectives).
void communicators(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  struct Row {
    Labels labels;
    CommunicatorCollective totals;
    bool named = true;  // false: the rest of the rank's pairs, summed
  };
  std::vector<Row> rows;
  for (const ProcessReport* p : processes) {
    std::vector<const CommunicatorCollective*> ordered;
    for (const CommunicatorCollective& c : p->communicator_collectives) ordered.push_back(&c);
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const auto* x, const auto* y) { return x->gpu_ns > y->gpu_ns; });
    const Labels labels = process_labels(report, *p);
    for (std::size_t i = 0; i < ordered.size() && i < kMetricsTopCommunicatorOps; ++i)
      rows.push_back({with(with(with(labels, "communicator", fmt::format("{:016x}", ordered[i]->communicator)),
                                "collective", ordered[i]->op),
                           "comm_size", std::to_string(ordered[i]->comm_size)),
                      *ordered[i]});
    if (ordered.size() <= kMetricsTopCommunicatorOps) continue;
    Row& rest = rows.emplace_back(
        Row{with(with(with(labels, "communicator", "other"), "collective", "other"), "comm_size", "other"), {}, false});
    for (std::size_t i = kMetricsTopCommunicatorOps; i < ordered.size(); ++i) {
      rest.totals.calls += ordered[i]->calls;
      rest.totals.timed += ordered[i]->timed;
      rest.totals.gpu_ns += ordered[i]->gpu_ns;
    }
  }
  e.family("trainshim_collective_calls", "counter", "Collective calls, by communicator and collective.");
  for (const Row& r : rows) e.sample(r.labels, double(r.totals.calls));
  e.family("trainshim_collective_timed_calls", "counter",
           "Those whose GPU duration was measured (the shim times them on their stream).");
  for (const Row& r : rows) e.sample(r.labels, double(r.totals.timed));
  e.family("trainshim_collective_message_bytes", "counter",
           "The timed collectives' whole messages, as the algorithm bandwidth counts them (for all_gather and "
           "the like, the per-rank count times the ranks); divided by trainshim_collective_timed_calls, NCCL "
           "Inspector's message size.",
           "bytes");
  for (const Row& r : rows)
    if (r.named) e.sample(r.labels, r.totals.message_bytes());
  e.family("trainshim_collective_exec_seconds", "counter",
           "GPU time of the timed collectives, the wait for the last rank to arrive included (NCCL Inspector's "
           "execution time); divided by trainshim_collective_timed_calls, the mean.",
           "seconds");
  for (const Row& r : rows) e.sample(r.labels, seconds(r.totals.gpu_ns));
  e.family("trainshim_collective_algorithm_bandwidth_bytes_per_second", "gauge",
           "The collectives' message bytes per second of their GPU time (NCCL Inspector's and nccl-tests' algBw).");
  for (const Row& r : rows)
    if (r.named && r.totals.gpu_ns > 0) e.sample(r.labels, r.totals.algorithm_bandwidth());
  e.family("trainshim_collective_bus_bandwidth_bytes_per_second", "gauge",
           "The algorithm bandwidth times what each link carries: 2(n-1)/n for all_reduce, (n-1)/n for gathers "
           "and scatters, 1 for broadcast and reduce (NCCL Inspector's and nccl-tests' busBw).");
  for (const Row& r : rows)
    if (r.named && r.totals.gpu_ns > 0) e.sample(r.labels, r.totals.bus_bandwidth());
}

// Per rank that sent or received, its point-to-point calls (pipeline parallelism's activations and
// gradients), which NCCL's Inspector leaves out of its Prometheus metrics.
void point_to_point(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  std::vector<const ProcessReport*> with_p2p;
  for (const ProcessReport* p : processes)
    if (p->p2p.sends + p->p2p.recvs > 0) with_p2p.push_back(p);
  const auto by_direction = [&](int64_t PointToPointCalls::*send, int64_t PointToPointCalls::*recv) {
    for (const ProcessReport* p : with_p2p) {
      e.sample(with(process_labels(report, *p), "direction", "send"), double(p->p2p.*send));
      e.sample(with(process_labels(report, *p), "direction", "recv"), double(p->p2p.*recv));
    }
  };
  e.family("trainshim_p2p_calls", "counter", "Point-to-point calls (ncclSend, ncclRecv), by direction.");
  by_direction(&PointToPointCalls::sends, &PointToPointCalls::recvs);
  e.family("trainshim_p2p_bytes", "counter", "Their bytes, by direction.", "bytes");
  by_direction(&PointToPointCalls::send_bytes, &PointToPointCalls::recv_bytes);
  e.family("trainshim_p2p_timed_groups", "counter",
           "Groups of point-to-point calls whose GPU duration was measured (the shim times a group's point-to-point "
           "work once).");
  for (const ProcessReport* p : with_p2p) e.sample(process_labels(report, *p), double(p->p2p.timed));
  e.family("trainshim_p2p_exec_seconds", "counter",
           "GPU time of the timed point-to-point work, the wait for the peer included.", "seconds");
  for (const ProcessReport* p : with_p2p) e.sample(process_labels(report, *p), seconds(p->p2p.gpu_ns));
}

void step_shares(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  e.family("trainshim_input_wait_ratio", "gauge", "Share of the rank's step its GPU waited for the step's input.",
           "ratio");
  for (const ProcessReport* p : processes) {
    if (!p->step_breakdown) continue;
    double input = 0;
    for (const StepShare& share : p->step_breakdown->parts)
      if (share.part == StepPart::Input) input += share.share;
    e.sample(process_labels(report, *p), input);
  }
  e.family("trainshim_gpu_busy_ratio", "gauge",
           "Share of the steps on the GPU timeline in which the rank's GPU ran work (compute and communication).",
           "ratio");
  for (const ProcessReport* p : processes)
    if (p->gpu.has_figures()) e.sample(process_labels(report, *p), p->gpu.share(p->gpu.busy_ns));
  e.family("trainshim_gpu_idle_ratio", "gauge",
           "Share of the steps on the GPU timeline in which the rank's GPU sat idle, by what the host was doing.",
           "ratio");
  for (const ProcessReport* p : processes) {
    if (!p->gpu.has_figures()) continue;
    for (int c = 0; c < kIdleCauseCount; ++c)
      e.sample(with(process_labels(report, *p), "cause", idle_cause_key(IdleCause(c))),
               p->gpu.share(p->gpu.idle_by_cause_ns[c]));
  }
}

// The top sites of each rank by host time blocked, the rest summed into site="other"; `extra(site)`
// its other label (an "other" site gets "other").
template <class Value>
void top_sites(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes,
               const std::vector<SyncSite> RankSyncs::*sites, std::string_view extra_key,
               std::string (*extra)(const SyncSite&), Value value) {
  for (const ProcessReport* p : processes) {
    std::vector<const SyncSite*> ordered;
    for (const SyncSite& s : p->sync_sites.*sites) ordered.push_back(&s);
    std::stable_sort(ordered.begin(), ordered.end(),
                     [](const SyncSite* x, const SyncSite* y) { return x->blocked_ns > y->blocked_ns; });
    const Labels labels = process_labels(report, *p);
    double rest = 0;
    for (std::size_t i = 0; i < ordered.size(); ++i) {
      if (i < kMetricsTopSites)
        e.sample(with(with(labels, "site", site_label(*ordered[i])), extra_key, extra(*ordered[i])),
                 value(*ordered[i]));
      else rest += value(*ordered[i]);
    }
    if (ordered.size() > kMetricsTopSites) e.sample(with(with(labels, "site", "other"), extra_key, "other"), rest);
  }
}

std::string operation_of(const SyncSite& s) { return s.classification.operation; }
std::string direction_of(const SyncSite& s) { return std::string(direction_name(s.copy_direction)); }

void sites(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  e.family("trainshim_hidden_sync_calls", "counter",
           "Calls in which the host blocked on the GPU without asking to, by the user's source line.");
  top_sites(e, report, processes, &RankSyncs::hidden, "operation", operation_of,
            [](const SyncSite& s) { return double(s.calls); });
  e.family("trainshim_hidden_sync_seconds", "counter", "Host time blocked in those calls.", "seconds");
  top_sites(e, report, processes, &RankSyncs::hidden, "operation", operation_of,
            [](const SyncSite& s) { return seconds(s.blocked_ns); });
  e.family("trainshim_pageable_copy_calls", "counter", "Copies from or to pageable (not pinned) host memory.");
  top_sites(e, report, processes, &RankSyncs::pageable_copies, "direction", direction_of,
            [](const SyncSite& s) { return double(s.calls); });
  e.family("trainshim_pageable_copy_bytes", "counter", "Bytes of those copies.", "bytes");
  top_sites(e, report, processes, &RankSyncs::pageable_copies, "direction", direction_of,
            [](const SyncSite& s) { return double(s.bytes); });
  e.family("trainshim_pageable_copy_seconds", "counter", "Host time in those copies.", "seconds");
  top_sites(e, report, processes, &RankSyncs::pageable_copies, "direction", direction_of,
            [](const SyncSite& s) { return seconds(s.blocked_ns); });
}

void lost(Exposition& e, const Report& report, const std::vector<const ProcessReport*>& processes) {
  e.family("trainshim_records_lost", "counter", "Records of the rank that never reached the database, by cause.");
  for (const ProcessReport* p : processes) {
    const Labels labels = process_labels(report, *p);
#define TS_LOST(column, json_key, words, meaning) e.sample(with(labels, "cause", json_key), double(p->lost.column));
#include "trainshim/counters.def"
  }
}

void hangs(Exposition& e, const Report& report) {
  e.family("trainshim_hangs", "counter", "Hangs the collector detected, by kind.");
  for (const auto kind : {schema::HangKind::Collective, schema::HangKind::NoProgress}) {
    const auto n =
        std::count_if(report.hangs.begin(), report.hangs.end(), [&](const HangRow& h) { return h.kind == kind; });
    e.sample({{"job", report.job}, {"kind", std::string(schema::hang_kind_name(kind))}}, double(n));
  }
  e.family("trainshim_hang_missing_rank", "gauge",
           "1 for each rank a detected hang's collective waits for: it never entered it (host: its node, where "
           "this node runs it).");
  std::set<int> missing;
  for (const HangRow& h : report.hangs) missing.insert(h.missing.begin(), h.missing.end());
  for (const int rank : missing) {
    Labels labels{{"job", report.job}, {"rank", std::to_string(rank)}};
    const auto local = std::find_if(report.processes.begin(), report.processes.end(),
                                    [&](const ProcessReport& p) { return p.rank == rank; });
    if (local != report.processes.end()) labels.push_back({"host", local->host});
    e.sample(labels, 1);
  }
}

}  // namespace

const char* metrics_content_type(MetricsFormat format) {
  return format == MetricsFormat::OpenMetrics ? "application/openmetrics-text; version=1.0.0; charset=utf-8"
                                              : "text/plain; version=0.0.4; charset=utf-8";
}

std::string render_metrics(const Report& report, MetricsFormat format, double compute_seconds) {
  Exposition e(format);
  e.family("trainshim_job", "info", "The job the metrics are of, and trainshim's version.");
  e.sample({{"job", report.job}, {"version", std::string(kTrainshimVersion)}}, 1);
  const std::vector<const ProcessReport*> processes = exported_processes(report);
  step_histograms(e, report, processes);
  progress(e, report, processes);
  waits(e, report, processes);
  communicators(e, report, processes);
  point_to_point(e, report, processes);
  step_shares(e, report, processes);
  sites(e, report, processes);
  lost(e, report, processes);
  hangs(e, report);
  e.family("trainshim_metrics_compute_seconds", "gauge", "How long reading the run's databases for these metrics took.",
           "seconds");
  e.sample({{"job", report.job}}, compute_seconds);
  e.family("trainshim_metrics_series", "gauge", "Series in this exposition, this one included.");
  e.sample({{"job", report.job}}, double(e.series() + 1));
  return e.finish();
}

}  // namespace trainshim::cli
