#include "render/report_json.hpp"

#include <fmt/format.h>

#include "diagnose/present.hpp"
#include "store/thread_words.hpp"

namespace trainshim::cli {

namespace {

nlohmann::ordered_json copies_json(const std::vector<CopyRow>& rows) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& c : rows)
    out.push_back({{"direction", direction_name(c.direction)},
                   {"host_memory", host_memory_name(c.host_memory)},
                   {"calls", c.calls},
                   {"bytes", c.bytes},
                   {"host_ns", c.host_ns}});
  return out;
}
nlohmann::ordered_json syncs_json(const std::vector<SyncRow>& rows) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& s : rows) out.push_back({{"api", s.api}, {"calls", s.calls}, {"blocked_ns", s.blocked_ns}});
  return out;
}
nlohmann::ordered_json collectives_json(const std::vector<CollectiveRow>& rows) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& c : rows)
    out.push_back({{"op", c.op}, {"calls", c.calls}, {"bytes", c.bytes}, {"host_ns", c.host_ns}});
  return out;
}

nlohmann::ordered_json sites_json(const std::vector<SyncSite>& sites, const RankSyncs& rs) {
  auto out = nlohmann::ordered_json::array();
  for (const auto& site : sites) {
    auto python = nlohmann::ordered_json::array();
    for (const auto& f : site.python)
      python.push_back({{"file", f.file}, {"line", f.line}, {"function", f.function}, {"source", f.source}});
    auto native = nlohmann::ordered_json::array();
    for (const auto& f : site.native)
      native.push_back({{"function", f.function}, {"module", f.module}, {"file", f.file}, {"line", f.line}});
    out.push_back(
        {{"operation", site.classification.operation},
         {"cause", site.classification.cause},
         {"advice", site.classification.advice},
         {"rule", site.classification.rule},
         {"native_frame", site.classification.native_frame},
         {"file", site.file},
         {"line", site.line},
         {"function", site.function},
         {"source", site.source},
         {"in_backward", site.in_backward},
         {"calls", site.calls},
         {"per_step", optional_json(per_step(double(site.calls), rs.steps.count))},
         {"per_second", per_second(double(site.calls), rs.span_ns)},
         {"blocked_ns", site.blocked_ns},
         {"bytes", site.bytes},
         {"share_of_step", share_of_span(site.blocked_ns, rs.span_ns)},
         {"bubble_ns", site.bubble_calls ? nlohmann::ordered_json(site.bubble_ns) : nullptr},
         {"bubble_ns_per_call",
          site.bubble_calls ? nlohmann::ordered_json(site.bubble_ns / site.bubble_calls) : nullptr},
         {"bubble_measured",
          site.bubble_calls ? nlohmann::ordered_json(site.bubble_on_gpu ? "gpu_timeline" : "host_launch") : nullptr},
         {"python_stack", python},
         {"native_stack", native}});
  }
  return out;
}

// The rank's GPU timeline; its figures null when it has none (why_none says why).
nlohmann::ordered_json gpu_json(const GpuTimelineReport& g) {
  const bool figures = g.has_figures();
  auto share = [&](int64_t ns) { return figures ? nlohmann::ordered_json(g.share(ns)) : nullptr; };
  nlohmann::ordered_json by_cause = nullptr;
  if (figures) {
    by_cause = nlohmann::ordered_json::object();
    for (int c = 0; c < kIdleCauseCount; ++c) by_cause[idle_cause_key(IdleCause(c))] = g.share(g.idle_by_cause_ns[c]);
  }
  auto gaps = nlohmann::ordered_json::array();
  for (const IdleGap& gap : g.gaps)
    gaps.push_back({{"step", gap.step},
                    {"start_ns", gap.start_ns},
                    {"duration_ns", gap.duration_ns},
                    {"cause", idle_cause_key(gap.cause)},
                    {"site", gap.site.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(gap.site)}});
  auto gap_groups = nlohmann::ordered_json::array();
  for (const IdleGapGroup& group : g.gap_groups)
    gap_groups.push_back(
        {{"cause", idle_cause_key(group.cause)},
         {"site", group.site.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(group.site)},
         {"count", group.count},
         {"total_ns", group.total_ns},
         {"shortest_ns", group.shortest_ns},
         {"longest_ns", group.longest_ns},
         {"steps", group.steps},
         {"first_step", group.first_step},
         {"last_step", group.last_step}});
  auto top_kernels = nlohmann::ordered_json::array();
  for (const KernelTime& k : g.kernels.top)
    top_kernels.push_back({{"name", k.name}, {"count", k.count}, {"total_ns", k.total_ns}, {"share", k.share}});
  nlohmann::ordered_json out = {
      {"timeline", g.timeline.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.timeline)},
      {"why_none", g.why_none.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(g.why_none)},
      {"covered_steps", g.covered_steps},
      {"busy_share", share(g.busy_ns)},
      {"communication_share", share(g.communication_ns)},
      {"idle_share", share(g.idle_ns)},
      {"idle_ns_per_step", figures ? nlohmann::ordered_json(g.per_step(g.idle_ns)) : nullptr},
      {"idle_by_cause", by_cause},
      {"gap_threshold_ns", figures ? nlohmann::ordered_json(g.gap_threshold_ns) : nullptr},
      {"gaps_above_threshold", g.gaps_above_threshold},
      {"gaps", gaps},
      {"gap_groups", gap_groups},
      {"top_kernels", top_kernels},
      {"fp32_gemm_share", g.kernels.busy_ns > 0 ? nlohmann::ordered_json(g.kernels.fp32_gemm_share) : nullptr}};
  add_gpu_counters_json(out, g.records);
  return out;
}

// The rank's sampler: its state, rate and counts.
nlohmann::ordered_json sampler_json(const HostReport& h) {
  nlohmann::ordered_json out = {{"state", h.sampler}, {"hz", h.sample_hz}, {"samples", h.samples}};
  add_sampler_counters_json(out, h.counters);
  return out;
}

// The input wait the main thread's samples show; null without them.
nlohmann::ordered_json input_wait_json(const HostReport& h) {
  const auto& w = h.input_wait;
  if (!w) return nullptr;
  const std::optional<int64_t> per_step = w->ns_per_step();
  return {{"share", w->share()},
          {"ns_per_step", per_step ? nlohmann::ordered_json(*per_step) : nullptr},
          {"queue_share", w->queue_share()},
          {"site", w->site.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(w->site)},
          {"steps", w->steps}};
}

nlohmann::ordered_json step_breakdown_json(const std::optional<StepBreakdown>& b) {
  if (!b) return nullptr;
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  for (const StepShare& part : b->parts)
    parts.push_back({{"part", step_part_key(part.part)},
                     {"site", part.site.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(part.site)},
                     {"rank", part.rank >= 0 ? nlohmann::ordered_json(part.rank) : nlohmann::ordered_json(nullptr)},
                     {"ns_per_step", part.ns_per_step},
                     {"share", part.share}});
  return {{"measured", b->measured},
          {"steps", b->steps},
          {"long_steps", b->long_steps},
          {"step_ns", b->step_ns},
          {"parts", parts}};
}

nlohmann::ordered_json root_causes_json(const Diagnosis& d) {
  nlohmann::ordered_json causes = nlohmann::ordered_json::array();
  for (const RootCause& c : d.causes)
    causes.push_back({{"cause", cause_name(c)},
                      {"title", c.title},
                      {"rank", rank_json(c.rank)},
                      {"ranks", c.ranks},
                      {"cost_ns_per_step", c.cost_ns_per_step},
                      {"share", c.share},
                      {"predicted_step_ns", c.predicted_step_ns ? nlohmann::ordered_json(c.predicted_step_ns)
                                                                : nlohmann::ordered_json(nullptr)},
                      {"severity", cause_severity_name(c.severity)},
                      {"evidence", c.evidence},
                      {"advice", c.advice()}});
  return causes;
}

}  // namespace

nlohmann::ordered_json setup_json(const std::vector<SetupItem>& setup) {
  auto out = nlohmann::ordered_json::array();
  for (const SetupItem& s : setup)
    out.push_back({{"rank", rank_json(s.rank)},
                   {"pid", s.pid},
                   {"item", setup_item_name(s.item)},
                   {"observed", s.observed},
                   {"recommended", s.recommended},
                   {"ok", s.ok}});
  return out;
}

nlohmann::ordered_json render_json(const Report& report) {
  nlohmann::ordered_json doc;
  doc["format"] = "trainshim-report/1";
  doc["job"] = {{"id", report.job},
                {"database", report.database},
                {"processes", report.processes.size()},
                {"step_ns", report.diagnosis.step_ns ? nlohmann::ordered_json(report.diagnosis.step_ns)
                                                     : nlohmann::ordered_json(nullptr)},
                {"step_rank", rank_json(report.diagnosis.step_rank)}};
  doc["root_causes"] = root_causes_json(report.diagnosis);
  doc["ranks"] = nlohmann::ordered_json::array();
  for (const auto& p : report.processes) {
    doc["ranks"].push_back({{"rank", rank_json(p.rank)},
                            {"local_rank", rank_json(p.local_rank)},
                            {"world_size", rank_json(p.world_size)},
                            {"pid", p.pid},
                            {"host", p.host},
                            {"command", p.command},
                            {"ended", p.ended},
                            {"python_version", p.python_version.empty() ? nlohmann::ordered_json(nullptr)
                                                                        : nlohmann::ordered_json(p.python_version)},
                            {"python_stacks_unavailable", p.python_stacks_unavailable.empty()
                                                              ? nlohmann::ordered_json(nullptr)
                                                              : nlohmann::ordered_json(p.python_stacks_unavailable)},
                            {"events", p.events},
                            {"copies", copies_json(p.copies)},
                            {"syncs", syncs_json(p.api_waits)},
                            {"collectives", collectives_json(p.collectives)},
                            {"dropped_events", p.lost.total()},
                            {"lost", lost_json(p.lost)},
                            {"steps",
                             {{"count", p.sync_sites.steps.count},
                              {"rule", p.sync_sites.steps.rule},
                              {"step_ns", p.sync_sites.steps.step_ns},
                              {"span_ns", p.sync_sites.span_ns}}},
                            {"hidden_syncs", sites_json(p.sync_sites.hidden, p.sync_sites)},
                            {"explicit_syncs", sites_json(p.sync_sites.explicit_, p.sync_sites)},
                            {"pageable_sites", sites_json(p.sync_sites.pageable_copies, p.sync_sites)},
                            {"polls", sites_json(p.sync_sites.polls, p.sync_sites)},
                            {"step_breakdown", step_breakdown_json(p.step_breakdown)},
                            {"gpu", gpu_json(p.gpu)},
                            {"sampler", sampler_json(p.host_report)},
                            {"input_wait", input_wait_json(p.host_report)}});
  }
  doc["totals"] = {{"copies", copies_json(report.total_copies)},
                   {"syncs", syncs_json(report.total_syncs)},
                   {"collectives", collectives_json(report.total_collectives)},
                   {"dropped_events", report.total_lost.total()}};
  {
    const WaitReport& w = report.waits;
    const CollectiveAnalysis& a = w.analysis;
    auto ranks = nlohmann::ordered_json::array();
    for (const RankWaits& r : a.ranks) {
      const int64_t steps = steps_of_rank(report, r.rank);
      ranks.push_back({{"rank", r.rank},
                       {"collectives", r.collectives},
                       {"waited_ns", r.waited_ns},
                       {"per_step_ns", steps ? nlohmann::ordered_json(r.waited_ns / steps) : nullptr},
                       {"last_count", r.last_count},
                       {"last_fraction", r.last_fraction()},
                       {"imposed_ns", r.imposed_ns},
                       {"steady_imposed_ns", r.steady_imposed_ns}});
    }
    nlohmann::ordered_json straggler = nullptr;
    if (a.straggler >= 0) {
      auto activity = nlohmann::ordered_json::array();
      for (const auto& h : w.straggler_host)
        activity.push_back({{"file", h.file}, {"line", h.line}, {"function", h.function}, {"share", h.share}});
      int64_t imposed = 0;
      for (const RankWaits& r : a.ranks)
        if (r.rank == a.straggler) imposed = r.imposed_ns;
      const int64_t steps = steps_of_rank(report, a.straggler);
      straggler = {{"rank", a.straggler},
                   {"imposed_ns", imposed},
                   {"imposed_per_step_ns", steps ? nlohmann::ordered_json(imposed / steps) : nullptr},
                   {"host_activity", activity}};
    }
    nlohmann::ordered_json doing = nullptr;
    if (const auto& d = w.straggler_doing)
      doing = {{"rank", d->rank},
               {"thread", d->thread},
               {"function", d->function},
               {"file", d->file},
               {"line", d->line},
               {"share", d->share},
               {"state", std::string(stored_state_words(d->state))},
               {"syscall", syscall_words(d->syscall)},
               {"samples", d->samples}};
    auto captured = nlohmann::ordered_json::array();
    for (const CapturedCollectives& c : w.captured)
      captured.push_back({{"communicator", fmt::format("{:016x}", c.communicator)},
                          {"collectives", c.collectives},
                          {"ranks", c.ranks},
                          {"replays_measured", false}});
    doc["collective_waits"] = {{"matched", a.matched},
                               {"incomplete", a.incomplete},
                               {"communicators", a.communicators},
                               {"inconsistent", a.inconsistent},
                               {"duplicates", a.duplicates},
                               {"untimed", untimed_json(w)},
                               {"launched_on_nccl_thread", w.launched_in_progress},
                               {"captured", captured},
                               {"p2p",
                                {{"sends", w.p2p.sends},
                                 {"recvs", w.p2p.recvs},
                                 {"matched", w.p2p.matched},
                                 {"unmatched", w.p2p.unmatched},
                                 {"timed", w.p2p.timed},
                                 {"gpu_ns", w.p2p.gpu_ns},
                                 {"exchanges", w.p2p.exchanges}}},
                               {"ranks", ranks},
                               {"straggler", straggler},
                               {"straggler_doing", doing}};
  }
  doc["hangs"] = nlohmann::ordered_json::array();
  for (const HangRow& h : report.hangs)
    doc["hangs"].push_back({{"communicator", h.communicator},
                            {"sequence", h.sequence},
                            {"op", h.op},
                            {"waiting_ranks", h.waiting},
                            {"missing_ranks", h.missing},
                            {"waited_ns", h.waited_ns},
                            {"message", h.message},
                            {"kind", schema::hang_kind_name(h.kind)},
                            {"stacks", h.stacks}});
  doc["setup"] = setup_json(report.setup);
  doc["findings"] = nlohmann::ordered_json::array();
  for (const Finding& f : report.findings) {
    nlohmann::ordered_json finding = {{"kind", finding_kind_name(f)},
                                      {"rank", rank_json(f.rank)},
                                      {"calls", f.calls},
                                      {"bytes", f.bytes},
                                      {"cost_ns", f.cost_ns},
                                      {"message", f.message},
                                      {"advice", f.advice()},
                                      {"severity", cause_severity_name(f.severity)}};
    if (f.kind == FindingKind::Hang) {
      finding["hang_kind"] = schema::hang_kind_name(f.hang_kind);
      finding["stacks"] = f.stacks;
    }
    doc["findings"].push_back(std::move(finding));
  }
  return doc;
}

}  // namespace trainshim::cli
