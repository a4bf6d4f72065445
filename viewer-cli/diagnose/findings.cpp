#include "diagnose/findings.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "diagnose/present.hpp"
#include "text/format.hpp"

namespace trainshim::cli {

namespace {

// The share of step time the GPU waits for input before a data-starvation finding: the idle-gap
// threshold's 5 %.
constexpr double kStarvationShare = 0.05;

// "2.0 times per step", or per second in a run without steps.
std::string rate_words(int64_t calls, const RankSyncs& rs) {
  if (rs.steps.count) return fmt::format("{:.1f} times per step", *per_step(double(calls), rs.steps.count));
  return fmt::format("{:.1f} times per second", per_second(double(calls), rs.span_ns));
}

std::string share_words(int64_t blocked_ns, const RankSyncs& rs) {
  return rs.span_ns > 0 ? fmt::format(", {:.1f} % of {}", 100 * share_of_span(blocked_ns, rs.span_ns),
                                      rs.steps.count ? "step time" : "the run")
                        : std::string();
}

// ", and leaves the GPU idle 5.0 ms after each call (20.0 ms in all, on the GPU timeline)".
// The measured step breakdown's share for a part (at a sync's line), where there is one: what the
// findings say agrees with it.
struct MeasuredPart {
  int64_t ns_per_step = 0;
  double share = 0;
  int64_t steps = 0;  // the steps the breakdown is over
};
std::optional<MeasuredPart> measured_part(const ProcessReport& p, StepPart part, const std::string& site = "") {
  if (!p.step_breakdown || !p.step_breakdown->measured) return std::nullopt;
  const StepShare* found = p.step_breakdown->part_at(part, site);
  return MeasuredPart{found ? found->ns_per_step : 0, found ? found->share : 0, p.step_breakdown->steps};
}

std::string bubble_words(const SyncSite& site, const std::optional<MeasuredPart>& charged) {
  if (charged) {
    if (charged->ns_per_step == 0) return "; the GPU lost no time after it in the steps measured";
    return fmt::format("; the GPU sits idle {} per step after it ({:.1f} % of the step, on the GPU timeline)",
                       human_duration(charged->ns_per_step), 100 * charged->share);
  }
  if (!site.bubble_calls) return "";
  if (site.bubble_ns == 0) return "; the GPU still had work queued whenever it returned: no GPU time lost after it";
  return fmt::format(
      "; the GPU sits idle {} after each call ({} in all{})", human_duration(site.bubble_ns / site.bubble_calls),
      human_duration(site.bubble_ns),
      site.bubble_on_gpu ? ", on the GPU timeline" : ", host side: from its return to its thread's next kernel launch");
}

// The GPU waiting for input: idle before each step's first upload.
void add_starvation_finding(Report& report, const ProcessReport& p) {
  const GpuTimelineReport& g = p.gpu;
  // The step breakdown's input where measured: the gaps less what the host did first (logging).
  const std::optional<MeasuredPart> input = measured_part(p, StepPart::Input);
  const int64_t waiting_ns =
      input ? int64_t(input->share * double(g.covered_ns)) : g.idle_by_cause_ns[int(IdleCause::DataLoading)];
  if (!g.has_figures() || g.data_loading_steps == 0 || g.share(waiting_ns) < kStarvationShare) return;
  Finding f;
  f.kind = FindingKind::DataStarvation;
  f.rank = p.rank;
  f.calls = g.data_loading_steps;
  const int64_t per_step = input ? input->ns_per_step : g.per_step(waiting_ns);
  f.cost_ns = per_step * std::max(p.sync_sites.steps.count, g.covered_steps);
  const bool steady = 2 * g.data_loading_steps >= g.covered_steps;
  f.message =
      fmt::format("{}: the GPU is idle {:.0f} % of each step waiting for input (the gap before {} batch's upload{}){}",
                  rank_words(p.rank, p.pid), 100 * g.share(waiting_ns), steady ? "each" : "a",
                  g.input_site.empty() ? "" : " at " + g.input_site,
                  g.pageable_input ? "; the batches come from pageable memory (DataLoader pin_memory=False)" : "");
  if (!steady) f.message += fmt::format(", in {} of {} steps", g.data_loading_steps, g.covered_steps);
  // The loader's own time first: the gap is its time; pinning shortens only the upload after it.
  std::vector<std::string> remedies;
  if (steady)
    remedies.push_back(fmt::format("more DataLoader workers (num_workers) and a deeper prefetch_factor: each batch "
                                   "keeps the GPU waiting {}",
                                   human_duration(per_step)));
  else
    remedies.push_back("persistent_workers=True (workers that restart each epoch stall its first steps) and a deeper "
                       "prefetch_factor to absorb the slow batches");
  if (g.pageable_input) remedies.emplace_back(kPinAfterLoadingRemedy);
  f.remedies = std::move(remedies);
  report.findings.push_back(std::move(f));
}

// Matrix multiplies in FP32 on the CUDA cores, where autocast or TF32 would use tensor cores.
void add_fp32_gemm_finding(Report& report, const ProcessReport& p) {
  const KernelSummary& k = p.gpu.kernels;
  const std::string words = fp32_gemm_words(k);
  if (words.empty() || k.fp32_gemm_share < kFp32GemmShare) return;
  Finding f;
  f.kind = FindingKind::Fp32Gemm;
  f.rank = p.rank;
  f.cost_ns = k.fp32_gemm_ns;
  const auto advice = words.find(": use ");
  f.message = fmt::format("{}: {}", rank_words(p.rank, p.pid), words.substr(0, advice));
  f.remedies = {advice == std::string::npos ? std::string() : words.substr(advice + 2)};
  report.findings.push_back(std::move(f));
}

// Processes whose GPU timeline could not be taken, grouped by why.
void add_timeline_findings(Report& report) {
  std::map<std::string, std::vector<const ProcessReport*>> by_state;
  for (const ProcessReport& p : report.processes)
    if (!gpu_timeline_state_advice(p.gpu.timeline).empty()) by_state[p.gpu.timeline].push_back(&p);
  for (const auto& [state, processes] : by_state) {
    Finding f;
    f.kind = FindingKind::GpuTimeline;
    std::vector<std::string> who;
    for (const ProcessReport* p : processes) who.push_back(rank_words(p->rank, p->pid));
    f.rank = processes.size() == 1 ? processes.front()->rank : -1;
    f.calls = int64_t(processes.size());
    f.message = fmt::format(
        "{}: no GPU timeline{}: {}; without it the report has no GPU busy and idle figures, and sync bubbles are "
        "measured on the host side only (up to the next kernel launch)",
        fmt::join(who, ", "), state == "yielded" ? " after the other client started" : "",
        gpu_timeline_state_words(state));
    f.remedies = {gpu_timeline_state_advice(state)};
    report.findings.push_back(std::move(f));
  }
}

// The setup items of one process.
std::vector<const SetupItem*> setup_of(const Report& report, const ProcessReport& p) {
  std::vector<const SetupItem*> out;
  for (const SetupItem& s : report.setup)
    if (s.rank == p.rank && s.pid == p.pid) out.push_back(&s);
  return out;
}

// The main thread waiting for its DataLoader a large share of each step.
void add_input_bound_finding(Report& report, const ProcessReport& p) {
  const std::optional<InputWait>& wait = p.host_report.input_wait;
  if (!wait || wait->share() < kInputBoundShare) return;
  Finding f;
  f.kind = FindingKind::InputBound;
  f.rank = p.rank;
  f.calls = wait->steps;
  const std::optional<int64_t> per_step = wait->ns_per_step();
  f.cost_ns = per_step ? *per_step * wait->steps
              : p.host_report.sample_hz > 0
                  ? int64_t(double(wait->wait_samples) * 1e9 / double(p.host_report.sample_hz))
                  : 0;
  f.message = fmt::format("{}: the main thread waits for the DataLoader {:.0f} % of {}{}{}{}",
                          rank_words(p.rank, p.pid), 100 * wait->share(), per_step ? "each step" : "the run",
                          per_step ? fmt::format(" ({} per step)", human_duration(*per_step)) : std::string(),
                          wait->site.empty() ? "" : ", in next() at " + wait->site,
                          wait->queue_samples
                              ? fmt::format(" ({:.0f} % of it for the workers' queue)", 100 * wait->queue_share())
                              : std::string());
  std::vector<std::string> remedies;
  for (const SetupItem* s : setup_of(report, p))
    if (!s->ok && (s->item == SetupItemKind::DataloaderWorkers || s->item == SetupItemKind::PinnedMemory))
      remedies.push_back(s->recommended);
  if (remedies.empty())
    remedies.push_back(wait->queue_samples
                           ? "the workers do not keep up: more of them (num_workers, up to the cores per GPU less "
                             "one), a deeper prefetch_factor, persistent_workers=True, and a cheaper dataset "
                             "__getitem__ or transform"
                           : "the batches are loaded on the main thread: DataLoader(num_workers > 0) with "
                             "persistent_workers=True and pin_memory=True");
  f.remedies = std::move(remedies);
  report.findings.push_back(std::move(f));
}

// One warning per checklist item that is off, naming the processes it is off in.
void add_setup_findings(Report& report) {
  for (const SetupItemInfo& info : kSetupItems) {
    std::vector<const SetupItem*> off;
    for (const SetupItem& s : report.setup)
      if (!s.ok && s.item == info.item) off.push_back(&s);
    if (off.empty()) continue;
    Finding f;
    f.kind = FindingKind::Setup;
    f.setup_item = info.item;
    f.rank = off.size() == 1 ? off.front()->rank : -1;
    f.calls = int64_t(off.size());
    const bool alike = std::all_of(off.begin(), off.end(), [&](const SetupItem* s) {
      return s->observed == off.front()->observed && s->recommended == off.front()->recommended;
    });
    std::vector<std::string> who, observed, advice;
    for (const SetupItem* s : off) {
      who.push_back(rank_words(s->rank, s->pid));
      observed.push_back(rank_words(s->rank, s->pid) + ": " + s->observed);
      if (std::find(advice.begin(), advice.end(), s->recommended) == advice.end()) advice.push_back(s->recommended);
    }
    f.message = alike ? fmt::format("{}: {}: {}", fmt::join(who, ", "), info.words, off.front()->observed)
                      : fmt::format("{}: {}", info.words, fmt::join(observed, "; "));
    f.remedies = std::move(advice);
    report.findings.push_back(std::move(f));
  }
}

void add_straggler_finding(Report& report) {
  const CollectiveAnalysis& a = report.waits.analysis;
  if (a.straggler < 0) return;
  const RankWaits* s = a.waits_of(a.straggler);
  if (!s) return;
  const int64_t steps = steps_of_rank(report, a.straggler);
  Finding f;
  f.kind = FindingKind::Straggler;
  f.rank = a.straggler;
  f.calls = s->last_count;
  f.cost_ns = s->imposed_ns;
  f.message = fmt::format(
      "rank {} arrives last at {:.1f} % of its collectives and costs the other ranks {}", a.straggler,
      100 * s->last_fraction(),
      steps ? human_duration(s->imposed_ns / steps) + " per step" : human_duration(s->imposed_ns) + " in all");
  if (const auto& doing = report.waits.straggler_doing) {
    f.remedies = {
        fmt::format("while rank {} was late, its main thread was {}", a.straggler, straggler_doing_words(*doing))};
    report.findings.push_back(std::move(f));
    return;
  }
  f.remedies = {
      report.waits.straggler_host.empty()
          ? fmt::format("find what rank {} does on the host before its collectives (data loading, logging, "
                        "evaluation on one rank)",
                        a.straggler)
          : fmt::format("while rank {} was late its host was in {}: balance that work across ranks or move it "
                        "off the critical path",
                        a.straggler, host_activity_words(report.waits.straggler_host))};
  report.findings.push_back(std::move(f));
}

}  // namespace

void add_findings(Report& report) {
  for (const HangRow& h : report.hangs) {
    Finding f;
    f.kind = FindingKind::Hang;
    f.rank = h.missing.empty() ? -1 : h.missing.front();
    f.cost_ns = h.waited_ns;
    f.message = h.message;
    f.hang_kind = h.kind;
    f.stacks = h.stacks;
    if (h.kind == schema::HangKind::NoProgress) {
      if (!h.message.starts_with("no rank progressed"))
        f.message = fmt::format("no rank progressed for {} with no collective pending: {}", human_duration(h.waited_ns),
                                h.message);
      f.remedies = {"every rank is stuck outside NCCL: read each rank's stack (`trainshim dump` while it runs): a "
                    "DataLoader whose worker died or deadlocked, a lock or a barrier outside NCCL, or I/O that never "
                    "returns"};
    } else {
      f.remedies = {"look at what the missing rank was doing last: a rank that skips a collective (an evaluation or a "
                    "checkpoint on one rank, a data-dependent branch) leaves every other rank waiting"};
    }
    report.findings.push_back(std::move(f));
  }
  add_straggler_finding(report);
  for (const ProcessReport& p : report.processes) {
    for (const CopyRow& c : p.copies) {
      if (c.host_memory != HostMemory::Pageable ||
          (c.direction != Direction::HostToDevice && c.direction != Direction::DeviceToHost))
        continue;
      Finding f;
      f.kind = FindingKind::PageableCopy;
      f.rank = p.rank;
      f.calls = c.calls;
      f.bytes = c.bytes;
      f.cost_ns = c.host_ns;
      const bool h2d = c.direction == Direction::HostToDevice;
      f.message = fmt::format("{} copied {} {} {} pageable memory in {} calls ({} of host time)",
                              rank_words(p.rank, p.pid), human_bytes(c.bytes), h2d ? "H2D" : "D2H",
                              h2d ? "from" : "into", with_thousands(c.calls), human_duration(c.host_ns));
      f.operation = h2d ? "pageable H2D copy" : "pageable D2H copy";
      f.copy_direction = c.direction;
      f.remedies = {h2d ? "pin the host buffer (DataLoader pin_memory=True, or tensor.pin_memory()) and copy "
                          "with non_blocking=True so the copy overlaps compute"
                        : "copy into a pinned buffer with non_blocking=True; into pageable memory every D2H copy "
                          "blocks the host until the GPU reaches it"};
      report.findings.push_back(std::move(f));
    }
    const RankSyncs& rs = p.sync_sites;
    for (const SyncSite& site : rs.hidden) {
      Finding f;
      f.kind = FindingKind::HiddenSync;
      f.rank = p.rank;
      f.calls = site.calls;
      // The GPU time lost after the call is the sync's real cost, where it was measured: the step
      // breakdown's part at its line, else its bubbles, else the time it blocked.
      const std::optional<MeasuredPart> charged = measured_part(p, StepPart::Sync, site_location(site));
      f.cost_ns = charged             ? charged->ns_per_step * charged->steps
                  : site.bubble_calls ? site.bubble_ns
                                      : site.blocked_ns;
      f.message =
          fmt::format("{}: {} at {} blocks the host {} ({} in all{}){}", rank_words(p.rank, p.pid),
                      site.classification.operation, site_location(site), rate_words(site.calls, rs),
                      human_duration(site.blocked_ns), share_words(site.blocked_ns, rs), bubble_words(site, charged));
      f.remedies = {site.classification.advice};
      f.site = site_location(site);
      f.operation = site.classification.operation;
      report.findings.push_back(std::move(f));
    }
    add_starvation_finding(report, p);
    add_input_bound_finding(report, p);
    add_fp32_gemm_finding(report, p);
    if (p.lost.total() > 0) {
      Finding f;
      f.kind = FindingKind::DroppedEvents;
      f.rank = p.rank;
      f.calls = p.lost.total();
      f.message = fmt::format("{} lost {} records ({}): its figures are lower bounds", rank_words(p.rank, p.pid),
                              with_thousands(p.lost.total()), lost_words(p.lost));
      f.remedies = {loss_advice(p.lost)};
      report.findings.push_back(std::move(f));
    }
  }
  add_timeline_findings(report);
  add_setup_findings(report);
  for (const std::string& library : report.stripped_libraries) {
    Finding f;
    f.kind = FindingKind::StrippedLibrary;
    f.message = fmt::format("{} has no symbol table (.symtab): PyTorch's binding frames have no names there, so "
                            "operations are named from its exported op-entry frames alone and "
                            "torch.cuda.Event/Stream.synchronize() can show as unclassified",
                            library);
    f.remedies = {"profile with the PyPI wheel of the same version, or a build that strips debug information only "
                  "(strip --strip-debug)"};
    report.findings.push_back(std::move(f));
  }
  std::stable_sort(report.findings.begin(), report.findings.end(),
                   [](const Finding& a, const Finding& b) { return a.cost_ns > b.cost_ns; });
}

std::string loss_advice(const LostEvents& lost) {
  std::vector<std::string> causes;
  if (lost.dropped_ring_full > 0)
    causes.push_back(
        "ring full: raise TRAINSHIM_FIRST_RING_EVENTS (the main thread's ring), TRAINSHIM_RING_EVENTS (the other "
        "threads') or TRAINSHIM_RINGS");
  if (lost.dropped_side_full > 0) causes.push_back("side ring full: raise TRAINSHIM_SIDE_RECORDS");
  if (lost.dropped_not_ready > 0)
    causes.push_back("before recording started: other threads called CUDA while the first call set recording up, "
                     "which larger rings do not change; make one CUDA call before starting threads to record them");
  if (lost.lost_unpublished > 0)
    causes.push_back("unfinished at exit: a thread was inside a CUDA call when its process ended or was killed");
  if (lost.malformed > 0)
    causes.push_back("malformed: records that failed validation were skipped; check that nothing else writes into "
                     "/dev/shm/trainshim-*");
  return fmt::format("{}", fmt::join(causes, "; "));
}

}  // namespace trainshim::cli
