#include "diagnose/step_breakdown.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "diagnose/present.hpp"

namespace trainshim::cli {

const char* step_part_key(StepPart part) {
  switch (part) {
    case StepPart::Compute:
      return "compute";
    case StepPart::Communication:
      return "communication";
    case StepPart::WaitingForStraggler:
      return "waiting_for_straggler";
    case StepPart::WaitingForPeers:
      return "waiting_for_peers";
    case StepPart::Input:
      return "input";
    case StepPart::Sync:
      return "sync";
    case StepPart::PageableCopy:
      return "pageable_copy";
    case StepPart::HostInCollective:
      return "host_in_collective";
    case StepPart::LaunchBound:
      return "launch_bound";
    case StepPart::NotToldApart:
      return "not_told_apart";
  }
  return "";
}

std::string step_part_words(const StepShare& share) {
  switch (share.part) {
    case StepPart::Compute:
      return "GPU compute";
    case StepPart::Communication:
      return "GPU communication";
    case StepPart::WaitingForStraggler:
      return fmt::format("waiting for rank {}, the straggler", share.rank);
    case StepPart::WaitingForPeers:
      return share.rank >= 0 ? fmt::format("waiting for rank {}", share.rank) : "waiting for other late ranks";
    case StepPart::Input:
      return "GPU idle for input";
    case StepPart::Sync:
      return share.site.empty() ? "GPU idle after syncs" : "GPU idle after the sync at " + share.site;
    case StepPart::PageableCopy:
      return "GPU idle in pageable copies";
    case StepPart::HostInCollective:
      return "GPU idle, host in a collective call";
    case StepPart::LaunchBound:
      return "GPU idle, host launching (launch-bound)";
    case StepPart::NotToldApart:
      return "GPU and host work, not told apart";
  }
  return "";
}

int64_t StepBreakdown::ns_per_step(StepPart part) const {
  int64_t ns = 0;
  for (const StepShare& s : parts)
    if (s.part == part) ns += s.ns_per_step;
  return ns;
}

const StepShare* StepBreakdown::part_at(StepPart part, const std::string& site) const {
  for (const StepShare& s : parts)
    if (s.part == part && s.site == site) return &s;
  return nullptr;
}

namespace {

// The rank's waits for late ranks in one step: its waits after start-up, averaged over those
// collectives, times its collectives per step; and that time by the rank it waited for.
struct PeerWait {
  int64_t ns = 0;
  std::map<int, int64_t> by_rank_ns;
  bool collectives = false;  // it has collectives matched with other ranks'
};

PeerWait peer_wait_per_step(const RankWaits* waits, int64_t steps) {
  if (!waits || waits->steady_collectives == 0 || steps == 0) return {};
  const long double per_collective = static_cast<long double>(waits->steady_waited_ns) / waits->steady_collectives;
  const long double ns = per_collective * waits->collectives / steps;
  PeerWait out{static_cast<int64_t>(ns), {}, true};
  if (waits->steady_waited_ns > 0)
    for (const auto& [rank, waited] : waits->steady_waited_for_ns)
      out.by_rank_ns[rank] = static_cast<int64_t>(ns * waited / waits->steady_waited_ns);
  return out;
}

// Ranks other than the straggler that get a waiting part of their own: a rank of a job of hundreds
// waits a little for many; its main culprits are named, the rest is one part (rank -1).
constexpr std::size_t kPeerParts = 3;

// `total` shared among the ranks waited for as `wait` splits its time (the last rank takes what
// rounding leaves), the straggler and the kPeerParts largest others each by name; all of it to no
// rank (-1) when the waits name none.
std::map<int, int64_t> by_rank_waited_for(int64_t total, const PeerWait& wait, int straggler) {
  int64_t all = 0;
  for (const auto& [rank, ns] : wait.by_rank_ns) all += ns;
  if (all <= 0) return {{-1, total}};
  std::map<int, int64_t> out;
  int64_t placed = 0;
  for (const auto& [rank, ns] : wait.by_rank_ns) {
    const int64_t share = static_cast<int64_t>(static_cast<long double>(total) * ns / all);
    out[rank] = share;
    placed += share;
  }
  out.rbegin()->second += total - placed;
  std::vector<std::pair<int, int64_t>> others;
  for (const auto& [rank, ns] : out)
    if (rank != straggler) others.emplace_back(rank, ns);
  if (others.size() <= kPeerParts) return out;
  std::stable_sort(others.begin(), others.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (std::size_t i = kPeerParts; i < others.size(); ++i) {
    out.erase(others[i].first);
    out[-1] += others[i].second;
  }
  return out;
}

class Parts {
 public:
  // `steps`: how many steps the parts' times are over.
  Parts(StepBreakdown& out, int64_t steps) : out_(out), steps_(steps) {}
  void add(StepPart part, int64_t ns, std::string site = "", int rank = -1) {
    if (ns <= 0) return;
    out_.parts.push_back({part, std::move(site), rank, ns / steps_, 0});
    shares_.push_back(ns);
  }
  void finish(int64_t total_ns) {
    for (std::size_t i = 0; i < out_.parts.size(); ++i)
      out_.parts[i].share = static_cast<double>(shares_[i]) / static_cast<double>(total_ns);
    std::stable_sort(out_.parts.begin(), out_.parts.end(),
                     [](const StepShare& a, const StepShare& b) { return a.share > b.share; });
  }

 private:
  StepBreakdown& out_;
  int64_t steps_;
  std::vector<int64_t> shares_;
};

// Whether a step of this length is kept: at most kLongStepFactor times the median.
auto steady_rule(std::vector<int64_t> lengths) {
  int64_t median = 0;
  if (!lengths.empty()) {
    std::nth_element(lengths.begin(), lengths.begin() + lengths.size() / 2, lengths.end());
    median = lengths[lengths.size() / 2];
  }
  return [median](int64_t ns) { return ns <= kLongStepFactor * median; };
}

// On the GPU's records: every covered step's time is busy or idle, and idle time has one cause.
// `share` of each site's `ns` (the last site takes what rounding leaves), added to `into`.
void spread(const std::vector<std::pair<std::string, int64_t>>& sites, int64_t amount,
            std::map<std::string, int64_t>& into) {
  int64_t all = 0, placed = 0;
  for (const auto& site : sites) all += site.second;
  if (all <= 0 || amount <= 0) return;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const int64_t ns = i + 1 == sites.size()
                           ? amount - placed
                           : static_cast<int64_t>(static_cast<long double>(sites[i].second) * amount / all);
    into[sites[i].first] += ns;
    placed += ns;
  }
}

// The covered steps that are not long ones, summed; `steps` and `long_steps` counted in `out`.
CoveredStep steady_sum(const GpuTimelineReport& gpu, StepBreakdown& out) {
  std::vector<int64_t> lengths;
  for (const CoveredStep& s : gpu.steps) lengths.push_back(s.ns);
  const auto steady = steady_rule(lengths);
  CoveredStep sum;
  for (const CoveredStep& s : gpu.steps) {
    if (!steady(s.ns)) {
      ++out.long_steps;
      continue;
    }
    ++out.steps;
    sum.ns += s.ns;
    sum.busy_ns += s.busy_ns;
    sum.communication_ns += s.communication_ns;
    sum.input_after_sync_ns += s.input_after_sync_ns;
    for (int c = 0; c < kIdleCauseCount; ++c) sum.idle_by_cause_ns[c] += s.idle_by_cause_ns[c];
  }
  return sum;
}

StepBreakdown measured(const GpuTimelineReport& gpu, const HostReport& host, const PeerWait& wait, int straggler,
                       int64_t transfer_ns) {
  StepBreakdown out;
  out.measured = true;
  const CoveredStep sum = steady_sum(gpu, out);
  out.step_ns = sum.ns / out.steps;
  // The waits: the collectives' time beyond the transfer's (the last rank to arrive waits for no
  // one), else the waits the collectives' host-side arrivals give.
  const int64_t peer =
      transfer_ns > 0 && wait.collectives
          ? std::clamp<int64_t>(sum.communication_ns - transfer_ns * out.steps, 0, sum.communication_ns)
          : std::min(sum.communication_ns, wait.ns * out.steps);
  Parts parts(out, out.steps);
  parts.add(StepPart::Compute, sum.busy_ns - sum.communication_ns);
  parts.add(StepPart::Communication, sum.communication_ns - peer);
  for (const auto& [rank, ns] : by_rank_waited_for(peer, wait, straggler))
    parts.add(rank >= 0 && rank == straggler ? StepPart::WaitingForStraggler : StepPart::WaitingForPeers, ns, "", rank);
  // A data-loading gap after a sync holds what the host did from the sync's return to the upload:
  // loading the batch, and work of its own first (logging the value it read). Where the sampler
  // measured the main thread's wait for the DataLoader, the input keeps that much of the gaps, and
  // the rest is the syncs' bubble, spread over them as the gaps followed them.
  int64_t input = sum.idle_by_cause_ns[int(IdleCause::DataLoading)];
  std::map<std::string, int64_t> sync_by_site;
  if (host.input_wait && host.input_wait->ns_per_step()) {
    const int64_t loading = *host.input_wait->ns_per_step() * out.steps;
    const int64_t moved = std::clamp<int64_t>(input - loading, 0, sum.input_after_sync_ns);
    input -= moved;
    spread(gpu.input_after_sync_by_site, moved, sync_by_site);
  }
  parts.add(StepPart::Input, input);
  // The sites' shares of the sync idle time of all covered steps, applied to the kept steps'.
  spread(gpu.sync_idle_by_site, sum.idle_by_cause_ns[int(IdleCause::Sync)], sync_by_site);
  for (const auto& [site, ns] : sync_by_site) parts.add(StepPart::Sync, ns, site);
  parts.add(StepPart::PageableCopy, sum.idle_by_cause_ns[int(IdleCause::PageableCopy)]);
  parts.add(StepPart::HostInCollective, sum.idle_by_cause_ns[int(IdleCause::Collective)]);
  parts.add(StepPart::LaunchBound, sum.idle_by_cause_ns[int(IdleCause::Host)]);
  parts.finish(sum.ns);
  return out;
}

// From the host: the collectives' GPU-side waits, the main thread's input wait, each sync's bubble
// to the next launch, the pageable copies' host time; the rest is not told apart. Parts that
// overrun the step (the sampler's and the host's clocks disagree) are scaled to fit it.
StepBreakdown estimated(const RankSyncs& syncs, const HostReport& host, const PeerWait& wait, int straggler) {
  StepBreakdown out;
  // The host's figures are over the whole run: per step, they are divided by every step found,
  // and laid over the mean of the steps that are not long ones.
  const int64_t steps = syncs.steps.count;
  std::vector<int64_t> lengths;
  const std::vector<int64_t>& starts = syncs.steps.starts_ns;
  for (std::size_t k = 0; k + 1 < starts.size(); ++k) lengths.push_back(starts[k + 1] - starts[k]);
  const auto steady = steady_rule(lengths);
  int64_t steady_ns = 0;
  for (const int64_t ns : lengths) {
    if (!steady(ns)) {
      ++out.long_steps;
      continue;
    }
    ++out.steps;
    steady_ns += ns;
  }
  if (out.steps == 0) {  // no step's length known: the run's span over its steps
    out.steps = steps;
    out.step_ns = syncs.steps.step_ns;
  } else {
    out.step_ns = steady_ns / out.steps;
  }
  struct Part {
    StepPart part;
    std::string site;
    int rank;
    int64_t ns;
  };
  std::vector<Part> known;
  for (const auto& [rank, ns] : by_rank_waited_for(wait.ns, wait, straggler))
    known.push_back({rank >= 0 && rank == straggler ? StepPart::WaitingForStraggler : StepPart::WaitingForPeers, "",
                     rank, ns * steps});
  if (host.input_wait && host.input_wait->ns_per_step())
    known.push_back({StepPart::Input, "", -1, *host.input_wait->ns_per_step() * steps});
  for (const auto* list : {&syncs.hidden, &syncs.explicit_})
    for (const SyncSite& site : *list)
      if (!site.bubble_on_gpu) known.push_back({StepPart::Sync, site_location(site), -1, site.bubble_ns});
  int64_t pageable = 0;
  for (const SyncSite& site : syncs.pageable_copies) pageable += site.blocked_ns;
  known.push_back({StepPart::PageableCopy, "", -1, pageable});
  int64_t sum = 0;
  for (const Part& p : known) sum += std::max<int64_t>(0, p.ns);
  const int64_t total = out.step_ns * steps;  // in the host's figures' terms: every step
  const long double fit = sum > total && sum > 0 ? static_cast<long double>(total) / sum : 1;
  Parts parts(out, steps);
  int64_t placed = 0;
  for (const Part& p : known) {
    const int64_t ns = static_cast<int64_t>(std::max<int64_t>(0, p.ns) * fit);
    parts.add(p.part, ns, p.site, p.rank);
    placed += ns;
  }
  parts.add(StepPart::NotToldApart, total - placed);
  parts.finish(total);
  return out;
}

}  // namespace

int64_t communication_ns_per_step(const GpuTimelineReport& gpu) {
  if (!gpu.has_figures() || gpu.covered_steps == 0) return 0;
  StepBreakdown counted;
  const CoveredStep sum = steady_sum(gpu, counted);
  return sum.communication_ns / counted.steps;
}

std::optional<StepBreakdown> step_breakdown(const RankSyncs& syncs, const GpuTimelineReport& gpu,
                                            const HostReport& host, const RankWaits* waits, int straggler,
                                            int64_t transfer_ns) {
  const PeerWait wait = peer_wait_per_step(waits, syncs.steps.count);
  if (gpu.has_figures() && gpu.covered_steps > 0) return measured(gpu, host, wait, straggler, transfer_ns);
  if (syncs.steps.count > 0 && syncs.steps.step_ns > 0) return estimated(syncs, host, wait, straggler);
  return std::nullopt;
}

}  // namespace trainshim::cli
