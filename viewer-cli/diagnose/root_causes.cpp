#include "diagnose/root_causes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <vector>

#include "diagnose/findings.hpp"
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

// The job's steps replayed without a cause. Each rank's step k is its own work and its wait for
// the slowest rank of that step (its breakdown's waits, spread over its steps as its collectives'
// waits were, RankWaits::waited_by_step_ns): the collectives tie the ranks together, so the job's
// step k lasts as long as its slowest rank's own work (the critical path). Taking a cause's time
// off a rank's own work shortens the steps it was slowest in, and the others' waits for it; a step
// it was not slowest in keeps its length. A rank whose steps are not known (too few step starts)
// stands in with its mean own work in every step. Steps longer than kLongStepFactor times their
// rank's median (start-up, a checkpoint) are left out, as the breakdowns leave them out.
class StepReplay {
 public:
  explicit StepReplay(const Report& report) {
    for (const ProcessReport& p : report.processes) {
      if (!p.step_breakdown) continue;
      const StepBreakdown& b = *p.step_breakdown;
      Rank r;
      r.rank = p.rank;
      r.floor_ns = std::min(b.ns_per_step(StepPart::Compute) + b.ns_per_step(StepPart::Communication), b.step_ns);
      const int64_t waits_ns = b.ns_per_step(StepPart::WaitingForStraggler) + b.ns_per_step(StepPart::WaitingForPeers);
      const std::vector<int64_t>& starts = p.sync_sites.steps.starts_ns;
      if (starts.size() > 2) {
        // The breakdown's waits, spread over the steps as the collectives' waits were (evenly
        // where none were matched): the breakdown tells them apart from the transfer itself.
        const RankWaits* waits = report.waits.analysis.waits_of(p.rank);
        std::vector<int64_t> by_step(starts.size() - 1, 0);
        if (waits)
          std::copy_n(waits->waited_by_step_ns.begin(), std::min(by_step.size(), waits->waited_by_step_ns.size()),
                      by_step.begin());
        const long double matched = std::accumulate(by_step.begin(), by_step.end(), 0.0L) / by_step.size();
        std::vector<int64_t> lengths;
        for (std::size_t k = 0; k < by_step.size(); ++k) {
          const int64_t length = starts[k + 1] - starts[k];
          const auto waited =
              static_cast<int64_t>(matched > 0 ? static_cast<long double>(by_step[k]) * waits_ns / matched : waits_ns);
          lengths.push_back(length);
          r.own.push_back(length - std::clamp<int64_t>(waited, 0, length));
        }
        mark_long_steps(std::move(lengths));
        steps_ = steps_ ? std::min(*steps_, r.own.size()) : r.own.size();
      } else {
        r.own.push_back(b.step_ns - waits_ns);
      }
      ranks_.push_back(std::move(r));
    }
    for (std::size_t k = 0; k < steps_.value_or(1); ++k) {
      if (k < long_step_.size() && long_step_[k]) continue;
      Step step{k};
      for (std::size_t i = 0; i < ranks_.size(); ++i) {
        const int64_t own = ranks_[i].own_at(k);
        if (own > step.slowest_ns || step.slowest_rank == kNone) {
          step.second_ns = step.slowest_ns;
          step.slowest_ns = own;
          step.slowest_rank = i;
        } else {
          step.second_ns = std::max(step.second_ns, own);
        }
      }
      kept_.push_back(step);
    }
    baseline_ns_ = replay({});
  }

  struct Outcome {
    int64_t saved_ns = 0;    // the job's mean step, less with the removal
    std::vector<int> ranks;  // those it takes time off, and, when it saves `noticed_ns`, the others
  };

  // Every rank shares each step's length, so a rank the removal does not touch waits as much less
  // as the job's step shrinks.
  Outcome without(const Removal& removed, int64_t noticed_ns) const {
    Outcome out;
    out.saved_ns = baseline_ns_ - replay(removed);
    for (const Rank& r : ranks_) {
      const auto it = removed.find(r.rank);
      if ((it != removed.end() && it->second > 0) || out.saved_ns >= std::max<int64_t>(noticed_ns, 1))
        out.ranks.push_back(r.rank);
    }
    return out;
  }

 private:
  static constexpr std::size_t kNone = SIZE_MAX;
  struct Rank {
    int rank = -1;
    int64_t floor_ns = 0;      // its GPU's own work a step: no removal goes below it
    std::vector<int64_t> own;  // per step; one value alone when its steps are not known
    int64_t own_at(std::size_t k) const { return own.size() == 1 ? own.front() : own[k]; }
    // What its own work holds beyond its GPU's own work: where a cause's time can be.
    int64_t excess_at(std::size_t k) const { return std::max<int64_t>(own_at(k) - floor_ns, 0); }
  };
  // A replayed step: the two longest own works in it (a removal on one rank is replayed against
  // the longest of the others without going over every rank).
  struct Step {
    std::size_t k;
    std::size_t slowest_rank = kNone;
    int64_t slowest_ns = 0, second_ns = 0;
  };

  // Marks the steps of one rank longer than kLongStepFactor times its median step.
  void mark_long_steps(std::vector<int64_t> lengths) {
    if (long_step_.size() < lengths.size()) long_step_.resize(lengths.size(), false);
    std::vector<int64_t> sorted = lengths;
    std::nth_element(sorted.begin(), sorted.begin() + std::ptrdiff_t(sorted.size() / 2), sorted.end());
    const int64_t longest = kLongStepFactor * sorted[sorted.size() / 2];
    for (std::size_t k = 0; k < lengths.size(); ++k)
      if (lengths[k] > longest) long_step_[k] = true;
  }

  // The job's mean step over the kept steps with the removal: each step as long as its slowest
  // rank's own work.
  int64_t replay(const Removal& removed) const {
    if (kept_.empty()) return 0;
    // A rank's removal comes off its steps as their excess holds it: a starved rank's input wait
    // is in the steps that ran long, not spread over those that did not wait.
    std::vector<std::pair<std::size_t, long double>> taken;  // rank index, share of its excess taken
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      const auto it = removed.find(ranks_[i].rank);
      if (it == removed.end() || it->second <= 0) continue;
      long double excess = 0;
      for (const Step& step : kept_) excess += ranks_[i].excess_at(step.k);
      if (excess > 0)
        taken.emplace_back(i, std::min<long double>(1, it->second * static_cast<long double>(kept_.size()) / excess));
    }
    long double job = 0;
    for (const Step& step : kept_) {
      int64_t slowest = 0;
      if (taken.size() == 1) {
        slowest = taken.front().first == step.slowest_rank ? step.second_ns : step.slowest_ns;
      } else if (!taken.empty()) {
        std::size_t next = 0;
        for (std::size_t i = 0; i < ranks_.size(); ++i) {
          if (next < taken.size() && taken[next].first == i) {
            ++next;
            continue;
          }
          slowest = std::max(slowest, ranks_[i].own_at(step.k));
        }
      } else {
        slowest = step.slowest_ns;
      }
      for (const auto& [i, share] : taken) {
        const Rank& r = ranks_[i];
        slowest = std::max(slowest, r.own_at(step.k) - static_cast<int64_t>(r.excess_at(step.k) * share));
      }
      job += slowest;
    }
    return static_cast<int64_t>(job / static_cast<long double>(kept_.size()));
  }

  std::vector<Rank> ranks_;
  std::optional<std::size_t> steps_;  // the fewest steps of a rank whose steps are known
  std::vector<bool> long_step_;       // a step some rank spent over kLongStepFactor medians in
  std::vector<Step> kept_;            // the steps replayed
  int64_t baseline_ns_ = 0;           // the job's mean step as recorded
};

class Diagnoser {
 public:
  explicit Diagnoser(const Report& report) : report_(report), used_(report.findings.size(), false), replay_(report) {
    out_.finding_severity.assign(report.findings.size(), CauseSeverity::Advice);
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
    leave_pinning_to_its_cause();
    add_hidden_syncs();
    for (std::size_t i = 0; i < report_.findings.size(); ++i)
      if (!used_[i]) add_alone(i);
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

  // A measured cause: its cost is what the job's step loses with its time taken off the ranks'
  // own work, step by step (StepReplay). The ranks it touches are those it takes time off and
  // those that then wait less for the others.
  void add(RootCause cause, const std::vector<const Finding*>& evidence, const Removal& removed) {
    for (const Finding* f : evidence) cause.evidence.push_back(f->message);
    if (cause.identity.empty()) cause.identity = fmt::format("{} rank {}", cause_name(cause), cause.rank);
    if (out_.step_ns > 0) {
      const StepReplay::Outcome outcome = replay_.without(removed, out_.step_ns / 100);
      cause.ranks = outcome.ranks;
      cause.cost_ns_per_step = std::clamp<int64_t>(outcome.saved_ns, 0, out_.step_ns);
      cause.predicted_step_ns = out_.step_ns - cause.cost_ns_per_step;
      cause.share = double(cause.cost_ns_per_step) / double(out_.step_ns);
      cause.severity = severity_of(cause.share);
    } else {
      cause.severity = severity_of(-1);
    }
    if (cause.ranks.empty() && cause.rank >= 0) cause.ranks.push_back(cause.rank);
    for (const Finding* f : evidence) out_.finding_severity[std::size_t(f - report_.findings.data())] = cause.severity;
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
    cause.remedies = !input.empty()     ? input.front()->remedies
                     : evidence.empty() ? std::vector<std::string>{}
                                        : evidence.front()->remedies;
    // It loses its input wait, or, late for another reason, as much as the others waited for it
    // (its lateness), at least its time launching; the others' waits for it go with it (the replay).
    Removal removed;
    int64_t lateness = 0;
    for (const ProcessReport& p : report_.processes)
      if (p.rank != s && p.step_breakdown)
        lateness = std::max(lateness, p.step_breakdown->ns_per_step(StepPart::WaitingForStraggler));
    if (own)
      removed[s] = waits_for_input ? own->ns_per_step(StepPart::Input)
                                   : std::max(lateness, own->ns_per_step(StepPart::LaunchBound));
    add(std::move(cause), evidence, removed);
  }

  // With the pageable uploads a cause of their own, the input pipelines' advice keeps the loader's
  // remedy alone: the pinning is said once, under that cause.
  void leave_pinning_to_its_cause() {
    const bool pageable = std::any_of(out_.causes.begin(), out_.causes.end(),
                                      [](const RootCause& c) { return c.kind == CauseKind::PageableInput; });
    if (!pageable) return;
    for (RootCause& c : out_.causes)
      if (c.kind == CauseKind::InputPipeline || c.kind == CauseKind::Input)
        std::erase(c.remedies, kPinAfterLoadingRemedy);
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
    cause.remedies = evidence.front()->remedies;
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
    cause.remedies = !pinning.empty() ? pinning.front()->remedies : evidence.front()->remedies;
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
      cause.remedies = evidence.front()->remedies;
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
  void add_alone(std::size_t index) {
    const Finding& f = report_.findings[index];
    RootCause cause;
    cause.kind = CauseKind::Finding;
    cause.finding = f.kind;
    cause.setup_item = f.setup_item;
    cause.rank = f.rank;
    cause.title = f.message;
    cause.identity = fmt::format("{} rank {}", cause_name(cause), f.rank);
    cause.remedies = f.remedies;
    cause.severity = f.kind == FindingKind::Hang ? CauseSeverity::High : severity_of(-1);
    out_.finding_severity[index] = cause.severity;
    if (f.rank >= 0) cause.ranks.push_back(f.rank);
    out_.causes.push_back(std::move(cause));
  }

  static constexpr Wanted kWorkers{FindingKind::Setup, SetupItemKind::DataloaderWorkers};

  const Report& report_;
  std::vector<bool> used_;
  StepReplay replay_;
  Diagnosis out_;
};

}  // namespace

Diagnosis diagnose(const Report& report) { return Diagnoser(report).run(); }

}  // namespace trainshim::cli
