#include "render/report_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "diagnose/present.hpp"
#include "text/format.hpp"
#include "text/text_layout.hpp"

namespace trainshim::cli {

namespace {

constexpr std::size_t kKernelsShown = 5;  // of the 10 the JSON lists

void render_tables(std::string& out, const std::vector<CopyRow>& copies, const std::vector<SyncRow>& syncs,
                   const std::vector<CollectiveRow>& collectives, int64_t lost) {
  if (!copies.empty()) {
    out += fmt::format("  {:<14}{:<7}{:<10}{:>12}{:>12}{:>12}\n", "copies", "dir", "memory", "calls", "bytes",
                       "host time");
    for (const auto& c : copies)
      out += fmt::format("  {:<14}{:<7}{:<10}{:>12}{:>12}{:>12}\n", "", direction_name(c.direction),
                         host_memory_name(c.host_memory), with_thousands(c.calls), human_bytes(c.bytes),
                         human_duration(c.host_ns));
  }
  if (!syncs.empty()) {
    out += fmt::format("  {:<14}{:<29}{:>12}{:>12}\n", "syncs", "api", "calls", "blocked");
    for (const auto& s : syncs)
      out +=
          fmt::format("  {:<14}{:<29}{:>12}{:>12}\n", "", s.api, with_thousands(s.calls), human_duration(s.blocked_ns));
  }
  if (!collectives.empty()) {
    out += fmt::format("  {:<14}{:<17}{:>12}{:>12}{:>12}\n", "collectives", "op", "calls", "bytes", "host time");
    for (const auto& c : collectives)
      out += fmt::format("  {:<14}{:<17}{:>12}{:>12}{:>12}\n", "", c.op, with_thousands(c.calls), human_bytes(c.bytes),
                         human_duration(c.host_ns));
  }
  if (copies.empty() && syncs.empty() && collectives.empty()) out += "  no copies, syncs or collectives recorded\n";
  out += fmt::format("  dropped events: {}\n", with_thousands(lost));
}

void render_sites(std::string& out, const std::vector<SyncSite>& sites, const RankSyncs& rs) {
  for (const auto& site : sites) {
    const std::string rate = rs.steps.count ? fmt::format("{:.1f}", *per_step(double(site.calls), rs.steps.count))
                                            : fmt::format("{:.1f}/s", per_second(double(site.calls), rs.span_ns));
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>8.1f} %\n", site.classification.operation,
                       with_thousands(site.calls), rate, human_duration(site.blocked_ns),
                       100 * share_of_span(site.blocked_ns, rs.span_ns));
    out +=
        fmt::format("      at {}{}\n", site_location(site), site.in_backward ? " (in backward, autograd thread)" : "");
    if (!site.source.empty()) out += fmt::format("         {}\n", site.source);
    if (site.bubble_calls)
      out += fmt::format("      GPU idle after it: {} per call, {} in all ({})\n",
                         human_duration(site.bubble_ns / site.bubble_calls), human_duration(site.bubble_ns),
                         site.bubble_on_gpu ? "GPU timeline" : "host side, until its thread's next kernel launch");
  }
}

// The rank's GPU timeline: busy and idle shares of its steps, idle by cause, the longest gaps.
void render_kernels(std::string& out, const KernelSummary& k) {
  if (k.top.empty()) return;
  out += fmt::format("  {:<46} {:>9} {:>10} {:>10}\n", "Kernels by GPU time", "count", "total", "of busy");
  for (std::size_t i = 0; i < k.top.size() && i < kKernelsShown; ++i)
    out += fmt::format("  {:<46} {:>9} {:>10} {:>8.1f} %\n", cut_to_width(k.top[i].name, 46),
                       with_thousands(k.top[i].count), human_duration(k.top[i].total_ns), 100 * k.top[i].share);
  if (k.fp32_gemm_ns > 0)
    out +=
        fmt::format("  FP32 GEMMs (CUDA cores, no tensor cores): {:.1f} % of GPU busy time\n", 100 * k.fp32_gemm_share);
}

void render_gpu(std::string& out, const GpuTimelineReport& g) {
  render_kernels(out, g.kernels);
  out += gpu_counter_line(g.records);
  if (!g.has_figures()) {
    out += fmt::format("  GPU timeline: none: {}\n", g.why_none);
    return;
  }
  std::vector<IdleCause> causes;
  for (int c = 0; c < kIdleCauseCount; ++c)
    if (g.idle_by_cause_ns[c] > 0) causes.push_back(IdleCause(c));
  std::stable_sort(causes.begin(), causes.end(),
                   [&](IdleCause a, IdleCause b) { return g.idle_by_cause_ns[int(a)] > g.idle_by_cause_ns[int(b)]; });
  std::string by_cause;
  for (IdleCause c : causes)
    by_cause += fmt::format("{}{} {:.1f} %", by_cause.empty() ? "" : ", ", idle_cause_words(c),
                            100 * g.share(g.idle_by_cause_ns[int(c)]));
  out += fmt::format(
      "  GPU busy {:.1f} % of each step{}, idle {:.1f} %{}: {} steps on the GPU timeline, {} idle per "
      "step\n",
      100 * g.share(g.busy_ns),
      g.communication_ns ? fmt::format(" (communication {:.1f} %)", 100 * g.share(g.communication_ns)) : std::string(),
      100 * g.share(g.idle_ns), by_cause.empty() ? "" : " (" + by_cause + ")", g.covered_steps,
      human_duration(g.per_step(g.idle_ns)));
  if (g.gaps.empty()) {
    out += fmt::format("  no idle gap of {} or more\n", human_duration(g.gap_threshold_ns));
    return;
  }
  out += fmt::format("  {:<46} {:>6} {:>10} {:>10} {:>10}\n",
                     fmt::format("Idle gaps of {} or more ({})", human_duration(g.gap_threshold_ns),
                                 with_thousands(g.gaps_above_threshold)),
                     "gaps", "shortest", "longest", "in all");
  for (const IdleGapGroup& group : g.gap_groups) {
    out += fmt::format("  {:<46} {:>6} {:>10} {:>10} {:>10}\n", idle_cause_words(group.cause),
                       with_thousands(group.count), human_duration(group.shortest_ns), human_duration(group.longest_ns),
                       human_duration(group.total_ns));
    const std::string steps = group.steps == 1
                                  ? fmt::format("in step {} of {} covered", group.first_step, g.covered_steps)
                                  : fmt::format("in {} of {} covered steps ({} to {})", group.steps, g.covered_steps,
                                                group.first_step, group.last_step);
    out += fmt::format("      {}{}\n", steps, group.site.empty() ? "" : ", the host came back at " + group.site);
  }
}

void render_step_breakdown(std::string& out, const std::optional<StepBreakdown>& b) {
  if (!b) return;
  out +=
      fmt::format("  Step {} ({}, {} steps{}):\n", human_duration(b->step_ns),
                  b->measured ? "on the GPU's records" : "estimated from the host's records, no GPU timeline",
                  with_thousands(b->steps),
                  b->long_steps ? fmt::format("; {} over {} times the median left out", b->long_steps, kLongStepFactor)
                                : std::string());
  for (const StepShare& part : b->parts)
    out += fmt::format("    {:>5.1f} %  {:>9}  {}\n", 100 * part.share, human_duration(part.ns_per_step),
                       step_part_words(part));
}

// The straggler, where no cause shown names it: the verdict always says who the others wait for.
void render_straggler(std::string& out, const Report& report, std::size_t shown) {
  const CollectiveAnalysis& a = report.waits.analysis;
  if (a.straggler < 0) return;
  const auto& causes = report.diagnosis.causes;
  for (std::size_t i = 0; i < causes.size() && i < shown; ++i)
    if (causes[i].rank == a.straggler &&
        (causes[i].kind == CauseKind::InputPipeline || causes[i].kind == CauseKind::Straggler))
      return;
  const RankWaits* straggler = a.waits_of(a.straggler);
  if (!straggler) return;
  const int64_t steps = steps_of_rank(report, a.straggler);
  out += fmt::format(
      "  The straggler: rank {}, last to arrive at {:.0f} % of its collectives, costs the other "
      "ranks {}\n",
      a.straggler, 100 * straggler->last_fraction(),
      steps ? human_duration(straggler->imposed_ns / steps) + " per step" : human_duration(straggler->imposed_ns));
}

// The job's verdict first: its step and the causes that cost it most, each with what fixing it buys;
// the rest, and every finding, in Findings at the end.
constexpr std::size_t kEvidenceShown = 1;
// Evidence under its cause, less the cause's title where it repeats it ("rank 1: Tensor.item() at
// train.py:79 in main blocks the host ..." under "Tensor.item() at train.py:79 in main"): the
// verdict must fit a first screen.
std::string without_title(std::string evidence, const std::string& title) {
  if (const auto at = evidence.find(title + " "); !title.empty() && at != std::string::npos)
    evidence.erase(at, title.size() + 1);
  return evidence;
}
void render_diagnosis(std::string& out, const Report& report, const TextOptions& options) {
  const Diagnosis& d = report.diagnosis;
  if (d.causes.empty()) return;
  out += d.step_ns > 0 ? fmt::format("\nWhat to fix first (the job's step: {}, rank {}'s)\n", human_duration(d.step_ns),
                                     rank_label(d.step_rank))
                       : std::string("\nWhat to fix first (no step found: costs not measured)\n");
  std::size_t n = 0;
  for (const RootCause& c : d.causes) {
    if (++n > options.top) {
      out += fmt::format("  ... {} more {}\n", d.causes.size() - options.top,
                         options.summary ? "(trainshim report, without --summary)" : "below (Findings)");
      break;
    }
    out += fmt::format("  {}. [{}] {}\n", n, cause_severity_name(c.severity), c.title);
    if (c.cost_ns_per_step > 0)
      out += fmt::format("     costs {} per step ({:.1f} % of the step); fixed, the step would be about {}\n",
                         human_duration(c.cost_ns_per_step), 100 * c.share, human_duration(c.predicted_step_ns));
    else if (c.predicted_step_ns > 0 && (report.processes.size() > 1 || report.waits.analysis.ranks.size() > 1))
      out += fmt::format("     fixed alone, the job's step would not shorten: other ranks would still take {}\n",
                         human_duration(c.predicted_step_ns));
    else if (c.predicted_step_ns > 0)
      out += "     fixed, the step would not shorten: it cost the steps measured no time\n";
    for (std::size_t e = 0; e < c.evidence.size() && e < kEvidenceShown; ++e)
      out += fmt::format("     - {}{}\n", without_title(c.evidence[e], c.title),
                         e + 1 == kEvidenceShown && c.evidence.size() > kEvidenceShown
                             ? fmt::format(" ({} more in Findings)", c.evidence.size() - kEvidenceShown)
                             : std::string());
    if (!c.advice().empty()) out += fmt::format("     -> {}\n", c.advice());
  }
  render_straggler(out, report, options.top);
}

void render_sync_sections(std::string& out, const ProcessReport& p) {
  const RankSyncs& rs = p.sync_sites;
  if (rs.hidden.empty() && rs.explicit_.empty() && rs.polls.empty()) return;
  const std::string steps = rs.steps.count ? fmt::format("{} steps", with_thousands(rs.steps.count)) : "no steps found";
  out += fmt::format("  steps: {} ({})\n", steps, rs.steps.rule);
  const char* rate_header = rs.steps.count ? "per step" : "per sec";
  const char* share_header = rs.steps.count ? "of step" : "of run";
  if (!rs.hidden.empty()) {
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>10}\n", "Hidden synchronisations", "calls", rate_header,
                       "blocked", share_header);
    render_sites(out, rs.hidden, rs);
  }
  if (!rs.explicit_.empty()) {
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>10}\n", "Explicit synchronisations (asked for)", "calls",
                       rate_header, "blocked", share_header);
    render_sites(out, rs.explicit_, rs);
  }
  if (!rs.polls.empty()) {
    out += fmt::format("  {:<46} {:>9} {:>9} {:>10} {:>10}\n", "Polls (ask, never wait)", "calls", "per sec",
                       "in calls", share_header);
    for (const auto& site : rs.polls) {
      out += fmt::format("  {:<46} {:>9} {:>9.1f} {:>10} {:>8.1f} %\n", site.classification.operation,
                         with_thousands(site.calls), per_second(double(site.calls), rs.span_ns),
                         human_duration(site.blocked_ns), 100 * share_of_span(site.blocked_ns, rs.span_ns));
      out += fmt::format("      at {}\n", site_location(site));
    }
  }
}

// A rank's sampler and what its samples tell of the input wait: only where a sampler ran.
void render_host(std::string& out, const ProcessReport& p) {
  const HostReport& h = p.host_report;
  if (h.sampler.empty() && h.samples == 0) return;
  const std::string counters = sampler_counter_words(h.counters);
  out += fmt::format("  sampler: {}{}, {} samples{}\n", h.sampler.empty() ? "not started" : h.sampler,
                     h.sampler == "on" ? fmt::format(" at {} Hz", h.sample_hz) : std::string(),
                     with_thousands(h.samples), counters.empty() ? "" : " (" + counters + ")");
  if (const auto& w = h.input_wait) {
    const std::optional<int64_t> per_step = w->ns_per_step();
    out += fmt::format(
        "  input wait: {:.1f} % of {}{}{}{}\n", 100 * w->share(), per_step ? "each step" : "the run",
        per_step ? fmt::format(" ({} per step, {} steps)", human_duration(*per_step), w->steps) : std::string(),
        w->wait_samples ? fmt::format(", {:.0f} % of it in the workers' queue", 100 * w->queue_share()) : std::string(),
        w->site.empty() ? "" : ", next() called at " + w->site);
  }
}

// Each line of `text` indented by `indent`.
std::string indented(const std::string& text, const std::string& indent) {
  std::string out;
  for (std::size_t pos = 0; pos < text.size();) {
    const auto end = std::min(text.find('\n', pos), text.size());
    out += indent + text.substr(pos, end - pos) + "\n";
    pos = end + 1;
  }
  return out;
}

void render_hangs_text(std::string& out, const Report& report) {
  if (report.hangs.empty()) return;
  out += "\nHangs (seen by the collector while the job ran)\n";
  for (const HangRow& h : report.hangs) {
    out += fmt::format("  {}\n", h.message);
    out += indented(h.stacks, "    ");
  }
}

void render_waits_text(std::string& out, const Report& report) {
  const WaitReport& w = report.waits;
  const CollectiveAnalysis& a = w.analysis;
  if (a.matched == 0 && a.incomplete == 0 && w.untimed.total() == 0 && w.untimed_in_group_in_progress == 0 &&
      w.p2p.sends + w.p2p.recvs == 0)
    return;
  out += fmt::format("\nCollective waits ({} ranks, {} collectives matched on {} communicator{}{})\n", a.ranks.size(),
                     with_thousands(a.matched), a.communicators, a.communicators == 1 ? "" : "s",
                     a.incomplete ? fmt::format(", {} not seen on every rank", with_thousands(a.incomplete)) : "");
  out += fmt::format("  {:<6}{:>12}{:>12}{:>16}\n", "rank", "waited", "per step", "last to arrive");
  for (const RankWaits& r : a.ranks) {
    const int64_t steps = steps_of_rank(report, r.rank);
    out += fmt::format("  {:<6}{:>12}{:>12}{:>14.1f} %", r.rank, human_duration(r.waited_ns),
                       steps ? human_duration(r.waited_ns / steps) : std::string("-"), 100 * r.last_fraction());
    if (r.rank == a.straggler)
      out += fmt::format("   <- straggler: costs the others {}",
                         steps ? human_duration(r.imposed_ns / steps) + " per step" : human_duration(r.imposed_ns));
    out += "\n";
  }
  // The sampler's view of the late windows, where there is one: the calls' view names only the
  // collective the rank came late to.
  if (a.straggler >= 0 && !w.straggler_host.empty() && !w.straggler_doing)
    out += fmt::format("  While rank {} was late, its host was in: {}\n", a.straggler,
                       host_activity_words(w.straggler_host));
  if (a.straggler >= 0 && w.straggler_doing)
    out += fmt::format("  While rank {} was late, its main thread was {}\n", a.straggler,
                       straggler_doing_words(*w.straggler_doing));
  if (a.straggler < 0 && a.matched > 0) out += "  No straggler: no rank makes the others wait consistently.\n";
  out += untimed_lines(w.untimed);
  if (w.untimed_in_group_in_progress)
    out += fmt::format("  {} NCCL operations were not timed: their launch went to NCCL's own thread (non-blocking "
                       "communicator, ncclInProgress) and the program did not wait for it with "
                       "ncclCommGetAsyncError\n",
                       with_thousands(w.untimed_in_group_in_progress));
  for (const CapturedCollectives& c : w.captured)
    out += fmt::format("  communicator {:016x}: {} collectives captured into CUDA graphs; their replays are not "
                       "measured\n",
                       c.communicator, with_thousands(c.collectives));
  if (w.p2p.sends + w.p2p.recvs)
    out += fmt::format("  point-to-point: {} sends, {} receives, {} pairs matched, {} calls unmatched, {} timed on "
                       "the GPU ({}), of which {} exchanges with every rank (all_to_all), matched as collectives\n",
                       with_thousands(w.p2p.sends), with_thousands(w.p2p.recvs), with_thousands(w.p2p.matched),
                       with_thousands(w.p2p.unmatched), with_thousands(w.p2p.timed), human_duration(w.p2p.gpu_ns),
                       with_thousands(w.p2p.exchanges));
}

}  // namespace

std::string render_setup_text(const Report& report) {
  if (report.setup.empty()) return "";
  std::string out = "\nSetup (what every tuning guide checks first)\n";
  int64_t pid = -1;
  for (const SetupItem& s : report.setup) {
    if (s.pid != pid) {
      out += fmt::format("  {}\n", rank_words(s.rank, s.pid));
      pid = s.pid;
    }
    const bool unknown = s.observed == "unknown";
    out += fmt::format("    {:<4}{:<20}{}\n",
                       unknown ? "--"
                       : s.ok  ? "ok"
                               : "OFF",
                       setup_item_name(s.item), s.observed);
    if (!s.ok) out += fmt::format("{:<28}-> {}\n", "", s.recommended);
  }
  return out;
}

std::string render_text(const Report& report, const TextOptions& options) {
  std::string out = fmt::format("trainshim report: job {} ({} process{}), {}\n", report.job, report.processes.size(),
                                report.processes.size() == 1 ? "" : "es", report.database);
  if (report.processes.empty()) {
    out += "\nNo process of this job made a CUDA or NCCL call that trainshim records.\n";
    return out;
  }
  render_diagnosis(out, report, options);
  if (options.summary) {
    if (report.diagnosis.causes.empty())
      out += "\nNo cause found: nothing costs this job's step that trainshim measures.\n";
    return out;
  }
  for (const auto& p : report.processes) {
    out += fmt::format("\nrank {}  pid {}  host {}{}\n  {}\n", rank_label(p.rank), p.pid, p.host,
                       p.ended ? "" : "  (still running)", p.command);
    if (!p.python_stacks_unavailable.empty())
      out += fmt::format("  Python stacks unavailable: {}; sites are named by native frames\n",
                         p.python_stacks_unavailable);
    render_step_breakdown(out, p.step_breakdown);
    render_tables(out, p.copies, p.api_waits, p.collectives, p.lost.total());
    render_sync_sections(out, p);
    render_gpu(out, p.gpu);
    render_host(out, p);
  }
  render_hangs_text(out, report);
  render_waits_text(out, report);
  if (report.processes.size() > 1) {
    out += fmt::format("\nall ranks\n");
    render_tables(out, report.total_copies, report.total_syncs, report.total_collectives, report.total_lost.total());
  }
  out += render_setup_text(report);
  out += "\nFindings\n";
  if (report.findings.empty()) out += "  none: no pageable copies and no lost events\n";
  for (const auto& f : report.findings) out += fmt::format("  * {}\n    -> {}\n", f.message, f.advice());
  return out;
}

}  // namespace trainshim::cli
