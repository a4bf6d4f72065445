#include "diagnose/root_causes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "diagnose/present.hpp"
#include "diagnose/report_model.hpp"

namespace trainshim::cli {

CauseSeverity severity_of(double share) {
  if (share < 0) return CauseSeverity::Advice;
  if (share >= 0.10) return CauseSeverity::High;
  if (share >= 0.02) return CauseSeverity::Medium;
  return CauseSeverity::Low;
}

std::string cause_name(const RootCause& cause) {
  switch (cause.kind) {
    case CauseKind::InputPipeline:
      return "input_pipeline";
    case CauseKind::Straggler:
      return "straggler";
    case CauseKind::Input:
      return "input";
    case CauseKind::PageableInput:
      return "pageable_input";
    case CauseKind::HiddenSync:
      return "hidden_sync";
    case CauseKind::Finding:
      break;
  }
  return finding_kind_name(cause.finding, cause.setup_item);
}

const char* cause_severity_name(CauseSeverity severity) {
  switch (severity) {
    case CauseSeverity::High:
      return "high";
    case CauseSeverity::Medium:
      return "medium";
    case CauseSeverity::Low:
      return "low";
    case CauseSeverity::Advice:
      return "advice";
  }
  return "";
}

namespace {

// What fixing a cause takes off each rank's step, ns per step.
using Removal = std::map<int, int64_t>;

// The host's time blocked per step in the hidden syncs at these (location, operation) pairs, in
// the steps found: a call before the first step (DDP's start-up) is no part of the step.
int64_t blocked_ns_per_step(const ProcessReport& p, const std::set<std::pair<std::string, std::string>>& sites) {
  const RankSyncs& syncs = p.sync_sites;
  const std::vector<int64_t>& starts = syncs.steps.starts_ns;
  if (starts.size() < 2) return 0;
  int64_t ns = 0;
  for (const SyncCall& call : syncs.calls) {
    if (call.kind != SiteKind::HiddenSync || call.begin_ns < starts.front() || call.begin_ns >= starts.back()) continue;
    const SyncSite& s = syncs.hidden[call.site];
    if (sites.count({site_location(s), s.classification.operation})) ns += call.end_ns - call.begin_ns;
  }
  return ns / static_cast<int64_t>(starts.size() - 1);
}

// The host's time per step in copies from pageable memory to the GPU (the staging copy the host
// makes before the DMA), in the steps found: a pinned source and non_blocking=True take it off the
// host's path. An upload at start-up is no part of a step.
int64_t pageable_upload_ns_per_step(const ProcessReport& p) {
  const std::vector<int64_t>& starts = p.sync_sites.steps.starts_ns;
  return starts.size() < 2 ? 0 : p.sync_sites.pageable_upload_ns_in_steps / static_cast<int64_t>(starts.size() - 1);
}

class Diagnoser {
 public:
  explicit Diagnoser(const Report& report) : report_(report), used_(report.findings.size(), false) {
    for (const ProcessReport& p : report.processes)
      if (p.step_breakdown && p.step_breakdown->step_ns > out_.step_ns) {
        out_.step_ns = p.step_breakdown->step_ns;
        out_.step_rank = p.rank;
      }
  }

  Diagnosis run() {
    add_straggler();
    const int straggler = report_.waits.analysis.straggler;
    for (const ProcessReport& p : report_.processes)
      if (straggler < 0 || p.rank != straggler) add_input(p);
    add_pageable_input();
    add_hidden_syncs();
    for (std::size_t i = 0; i < report_.findings.size(); ++i)
      if (!used_[i]) add_alone(report_.findings[i]);
    std::stable_sort(out_.causes.begin(), out_.causes.end(), [](const RootCause& a, const RootCause& b) {
      if (a.cost_ns_per_step != b.cost_ns_per_step) return a.cost_ns_per_step > b.cost_ns_per_step;
      return a.severity < b.severity;
    });
    return std::move(out_);
  }

 private:
  const StepBreakdown* breakdown(int rank) const {
    for (const ProcessReport& p : report_.processes)
      if (p.rank == rank && p.step_breakdown) return &*p.step_breakdown;
    return nullptr;
  }

  // A kind of finding to take; a setup finding with its item.
  struct Wanted {
    FindingKind kind;
    SetupItemKind item{};
    bool matches(const Finding& f) const {
      return f.kind == kind && (kind != FindingKind::Setup || f.setup_item == item);
    }
  };

  // The findings of these kinds on `rank` (any rank for -2), taken for a cause.
  std::vector<const Finding*> take(const std::vector<Wanted>& kinds, int rank) {
    std::vector<const Finding*> out;
    for (std::size_t i = 0; i < report_.findings.size(); ++i) {
      const Finding& f = report_.findings[i];
      const bool wanted = std::any_of(kinds.begin(), kinds.end(), [&](const Wanted& w) { return w.matches(f); });
      if (used_[i] || !wanted || (rank != -2 && f.rank != rank)) continue;
      used_[i] = true;
      out.push_back(&f);
    }
    return out;
  }

  // A measured cause: its cost is what the job's step loses with the removed time taken off each
  // rank's step. A rank's step is its host's path (what the host does, and waits for) or its GPU's
  // (its own work), whichever is longer: time taken off the host's path leaves at least the GPU's
  // compute and communication. The collectives tie the ranks' steps: the job's step is the longest.
  void add(RootCause cause, const std::vector<const Finding*>& evidence, const Removal& removed) {
    for (const Finding* f : evidence) cause.evidence.push_back(f->message);
    if (cause.identity.empty()) cause.identity = fmt::format("{} rank {}", cause_name(cause), cause.rank);
    if (out_.step_ns > 0) {
      int64_t predicted = 0;
      for (const ProcessReport& p : report_.processes) {
        if (!p.step_breakdown) continue;
        const StepBreakdown& b = *p.step_breakdown;
        const auto it = removed.find(p.rank);
        const int64_t off = it == removed.end() ? 0 : it->second;
        const int64_t gpu_work = b.ns_per_step(StepPart::Compute) + b.ns_per_step(StepPart::Communication);
        predicted = std::max(predicted, off > 0 ? std::max(b.step_ns - off, std::min(gpu_work, b.step_ns)) : b.step_ns);
        if (off > 0) cause.ranks.push_back(p.rank);
      }
      cause.predicted_step_ns = predicted;
      cause.cost_ns_per_step = std::max<int64_t>(0, out_.step_ns - predicted);
      cause.share = double(cause.cost_ns_per_step) / double(out_.step_ns);
      cause.severity = severity_of(cause.share);
    } else {
      cause.severity = severity_of(-1);
    }
    if (cause.ranks.empty() && cause.rank >= 0) cause.ranks.push_back(cause.rank);
    out_.causes.push_back(std::move(cause));
  }

  // The straggler and what makes it late: its input pipeline when it waits for input, else its host.
  void add_straggler() {
    const int s = report_.waits.analysis.straggler;
    if (s < 0) return;
    std::vector<const Finding*> evidence = take({{FindingKind::Straggler}}, s);
    const std::vector<const Finding*> input =
        take({{FindingKind::DataStarvation}, {FindingKind::InputBound}, kWorkers}, s);
    evidence.insert(evidence.end(), input.begin(), input.end());
    const StepBreakdown* own = breakdown(s);
    const bool waits_for_input =
        !input.empty() || (own && own->ns_per_step(StepPart::Input) > 0 &&
                           own->ns_per_step(StepPart::Input) >= own->ns_per_step(StepPart::LaunchBound));
    RootCause cause;
    cause.rank = s;
    cause.kind = waits_for_input ? CauseKind::InputPipeline : CauseKind::Straggler;
    cause.title = waits_for_input ? fmt::format("rank {}'s input pipeline, which the other ranks wait for", s)
                                  : fmt::format("rank {} comes late to the collectives", s);
    cause.advice = !input.empty() ? input.front()->advice : evidence.empty() ? "" : evidence.front()->advice;
    // The others lose their waits for it; it loses its input wait, or, late for another reason, as
    // much as they waited for it (its lateness), at least its time launching.
    Removal removed;
    int64_t lateness = 0;
    for (const ProcessReport& p : report_.processes)
      if (p.rank != s && p.step_breakdown) {
        removed[p.rank] = p.step_breakdown->ns_per_step(StepPart::WaitingForStraggler);
        lateness = std::max(lateness, removed[p.rank]);
      }
    if (own)
      removed[s] = waits_for_input ? own->ns_per_step(StepPart::Input)
                                   : std::max(lateness, own->ns_per_step(StepPart::LaunchBound));
    add(std::move(cause), evidence, removed);
  }

  // A rank that is not the straggler waiting for its input.
  void add_input(const ProcessReport& p) {
    const std::vector<const Finding*> evidence =
        take({{FindingKind::DataStarvation}, {FindingKind::InputBound}}, p.rank);
    if (evidence.empty()) return;
    std::vector<const Finding*> workers = take({kWorkers}, p.rank);
    RootCause cause;
    cause.rank = p.rank;
    cause.kind = CauseKind::Input;
    cause.title = p.rank >= 0 ? fmt::format("rank {}'s input pipeline", p.rank) : "the input pipeline";
    cause.advice = evidence.front()->advice;
    std::vector<const Finding*> all = evidence;
    all.insert(all.end(), workers.begin(), workers.end());
    Removal removed;
    if (p.step_breakdown) removed[p.rank] = p.step_breakdown->ns_per_step(StepPart::Input);
    add(std::move(cause), all, removed);
  }

  // Uploads from pageable memory, the blocking uploads and the pinned-memory item: one cause. It
  // removes the host's time in the pageable copies (or the GPU's idle time in them, where longer:
  // the same time seen from the GPU) and the host's time blocked in the uploads; the GPU's idle time
  // after an upload stays: the host launches the same work after a non-blocking one.
  void add_pageable_input() {
    std::vector<const Finding*> evidence;
    for (std::size_t i = 0; i < report_.findings.size(); ++i) {
      const Finding& f = report_.findings[i];
      if (!used_[i] && f.kind == FindingKind::PageableCopy && f.copy_direction == Direction::HostToDevice) {
        used_[i] = true;
        evidence.push_back(&f);
      }
    }
    Removal removed;
    for (const ProcessReport& p : report_.processes) {
      std::set<std::pair<std::string, std::string>> uploads;  // location, operation
      for (const SyncSite& s : p.sync_sites.hidden)
        if (s.classification.rule == "upload") uploads.emplace(site_location(s), s.classification.operation);
      for (std::size_t i = 0; i < report_.findings.size(); ++i) {
        const Finding& f = report_.findings[i];
        if (!used_[i] && f.kind == FindingKind::HiddenSync && f.rank == p.rank &&
            uploads.count({f.site, f.operation})) {
          used_[i] = true;
          evidence.push_back(&f);
        }
      }
      if (p.step_breakdown)
        removed[p.rank] =
            std::max(p.step_breakdown->ns_per_step(StepPart::PageableCopy), pageable_upload_ns_per_step(p)) +
            blocked_ns_per_step(p, uploads);
    }
    const std::vector<const Finding*> pinning = take({{FindingKind::Setup, SetupItemKind::PinnedMemory}}, -2);
    evidence.insert(evidence.end(), pinning.begin(), pinning.end());
    if (evidence.empty()) return;
    RootCause cause;
    cause.kind = CauseKind::PageableInput;
    cause.title = "blocking uploads of the input from pageable memory";
    cause.advice = !pinning.empty() ? pinning.front()->advice : evidence.front()->advice;
    add(std::move(cause), evidence, removed);
  }

  // Each other sync, once for every rank it is on (its line and operation): its cost is its bubbles
  // (the GPU's idle time after it, at its line: the host's work with the value it read) and the
  // host's time blocked in it, which without the sync overlaps the GPU's work.
  void add_hidden_syncs() {
    using Key = std::pair<std::string, std::string>;  // location, operation
    std::map<Key, std::vector<const Finding*>> by_site;
    std::vector<Key> order;
    for (std::size_t i = 0; i < report_.findings.size(); ++i) {
      const Finding& f = report_.findings[i];
      if (used_[i] || f.kind != FindingKind::HiddenSync) continue;
      used_[i] = true;
      const Key key{f.site, f.operation};
      if (!by_site.count(key)) order.push_back(key);
      by_site[key].push_back(&f);
    }
    std::set<std::string> charged;
    for (const Key& key : order) {
      const std::string& site = key.first;
      const std::vector<const Finding*>& evidence = by_site[key];
      RootCause cause;
      cause.kind = CauseKind::HiddenSync;
      cause.site = site;
      cause.operation = key.second;
      cause.rank = evidence.size() == 1 ? evidence.front()->rank : -1;
      cause.title = fmt::format("{} at {}", evidence.front()->operation, site);
      cause.identity = "hidden_sync: " + identity_of(key);
      cause.advice = evidence.front()->advice;
      // The GPU's idle time after a line is charged once: to its costliest operation there (the
      // findings come by cost).
      const bool bubble_here = charged.insert(site).second;
      Removal removed;
      for (const ProcessReport& p : report_.processes) {
        if (!p.step_breakdown) continue;
        const StepShare* bubble = bubble_here ? p.step_breakdown->part_at(StepPart::Sync, site) : nullptr;
        removed[p.rank] = (bubble ? bubble->ns_per_step : 0) + blocked_ns_per_step(p, {key});
      }
      add(std::move(cause), evidence, removed);
    }
  }

  // A sync site's identity (its operation, file, function and line's text, not its number), from
  // the first process that has it at this (location, operation); the location where none does.
  std::string identity_of(const std::pair<std::string, std::string>& key) const {
    for (const ProcessReport& p : report_.processes)
      for (const SyncSite& s : p.sync_sites.hidden)
        if (site_location(s) == key.first && s.classification.operation == key.second) {
          std::string identity = site_identity(s);
          std::replace(identity.begin(), identity.end(), '\x1f', '|');
          return identity;
        }
    return key.second + " at " + key.first;
  }

  // A finding with no step part to remove: a hang, a setup item, lost records, a kernel precision.
  void add_alone(const Finding& f) {
    RootCause cause;
    cause.kind = CauseKind::Finding;
    cause.finding = f.kind;
    cause.setup_item = f.setup_item;
    cause.rank = f.rank;
    cause.title = f.message;
    cause.identity = fmt::format("{} rank {}", cause_name(cause), f.rank);
    cause.advice = f.advice;
    cause.severity = f.kind == FindingKind::Hang ? CauseSeverity::High : severity_of(-1);
    if (f.rank >= 0) cause.ranks.push_back(f.rank);
    out_.causes.push_back(std::move(cause));
  }

  static constexpr Wanted kWorkers{FindingKind::Setup, SetupItemKind::DataloaderWorkers};

  const Report& report_;
  std::vector<bool> used_;
  Diagnosis out_;
};

}  // namespace

Diagnosis diagnose(const Report& report) { return Diagnoser(report).run(); }

}  // namespace trainshim::cli
