#include "render/report_html.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <map>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "diagnose/setup.hpp"
#include "text/format.hpp"
#include "text/output_text.hpp"

namespace trainshim::cli {

namespace {

// Text in HTML, from the recording too: valid UTF-8, the markup characters escaped.
std::string escape(std::string_view text) { return xml_text(text); }

std::string percent(double share) { return fmt::format("{:.1f}&nbsp;%", 100 * share); }

// "0-3, 5, 7-8".
std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += ranks[i] == ranks[j] ? rank_label(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

// "file:line" linked to the file, and the rest of a "file:line in function" location as text.
std::string source_link(const std::string& file, int line, const std::string& rest = "") {
  const std::string shown = escape(fmt::format("{}:{}", file.empty() ? "?" : file, line));
  std::string out = file.starts_with('/')
                        ? fmt::format(R"(<a class="src" href="file://{}">{}</a>)", escape(file), shown)
                        : fmt::format(R"(<span class="src">{}</span>)", shown);
  return rest.empty() ? out : out + " " + escape(rest);
}

// A "file:line in function" location in words, its file:line linked.
std::string location_link(const std::string& location) {
  const std::size_t in = location.find(" in ");
  const std::string where = location.substr(0, in);
  const std::size_t colon = where.rfind(':');
  int line = 0;
  // A line number that is not one (a recording's garbage, a path with a colon) leaves it as words.
  if (colon == std::string::npos || colon + 1 == where.size()) return escape(location);
  const auto [end, error] = std::from_chars(where.data() + colon + 1, where.data() + where.size(), line);
  if (error != std::errc() || end != where.data() + where.size()) return escape(location);
  return source_link(where.substr(0, colon), line, in == std::string::npos ? "" : location.substr(in + 1));
}

// What a step's GPU time went to, in the strips' order from the bottom, and the colours the
// legend shows.
struct PartStyle {
  const char* key;
  const char* words;
  const char* colour;
};
constexpr PartStyle kCompute{"compute", "GPU compute", "#4c78a8"};
constexpr PartStyle kCommunication{"communication", "communication", "#72b7b2"};
constexpr PartStyle kWaiting{"waiting", "communication: waiting for late ranks", "#bab0ac"};
constexpr PartStyle kIdleStyles[kIdleCauseCount] = {{"data_loading", "idle: data loading", "#e45756"},
                                                    {"sync", "idle: sync", "#f58518"},
                                                    {"pageable_copy", "idle: pageable copy", "#b279a2"},
                                                    {"collective", "idle: host in collective", "#eeca3b"},
                                                    {"host", "idle: host busy", "#9d755d"}};
constexpr PartStyle kNotRecorded{"not_recorded", "not recorded (outside the GPU timeline)", "url(#not-recorded)"};

// The hatching of time the GPU timeline did not record, once per page.
constexpr const char* kPatterns =
    R"(<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs><pattern id="not-recorded" )"
    R"svg(width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" )svg"
    R"(fill="#eee"/><rect width="2" height="6" fill="#bbb"/></pattern></defs></svg>)";

constexpr const char* kStyle = R"(
:root{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d1d1f;background:#fff}
body{max-width:1240px;margin:0 auto;padding:12px 16px;line-height:1.45}
h1{font-size:1.5rem;margin:.2em 0}h2{font-size:1.2rem;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
h3{font-size:1rem;margin:1em 0 .3em}.muted{color:#666}
.causes{padding-left:1.2em}.causes li{margin:.5em 0}.cost{font-weight:600;font-variant-numeric:tabular-nums}
.sev{display:inline-block;border-radius:3px;padding:0 .4em;font-size:.8em;color:#fff;margin-right:.4em}
.sev-high{background:#c62828}.sev-medium{background:#ef6c00}.sev-low{background:#757575}.sev-advice{background:#1565c0}
.advice{margin:.2em 0 0;color:#333}
.wrap{overflow-x:auto}table{border-collapse:collapse;font-size:.9em;font-variant-numeric:tabular-nums}
th,td{padding:.2em .6em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
td.n,th.n{text-align:right}.ok{color:#2e7d32}.off{color:#c62828;font-weight:600}
.strip{margin:.6em 0}.strip svg{width:100%;height:110px;display:block;background:#fafafa}
.legend span{display:inline-block;margin-right:1em;font-size:.85em}
.legend svg{vertical-align:-.1em}
svg.heat{width:100%;height:auto;display:block}svg.bars{width:100%;height:auto;display:block;max-width:900px}
svg.flame{width:100%;height:auto;display:block}svg text{font-size:11px;fill:#1d1d1f}
pre{white-space:pre-wrap;overflow-wrap:anywhere;font-size:.85em}
.src{font-family:ui-monospace,monospace;font-size:.92em;overflow-wrap:anywhere}
@media (max-width:600px){body{padding:8px}th,td{padding:.15em .3em}.strip svg{height:80px}}
)";

void legend(std::string& out, bool with_not_recorded) {
  out += R"(<p class="legend">)";
  auto item = [&](const PartStyle& s) {
    out += fmt::format(
        R"(<span><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="{}"/></svg> {}</span>)",
        s.colour, s.words);
  };
  item(kCompute);
  item(kCommunication);
  item(kWaiting);
  for (const PartStyle& s : kIdleStyles) item(s);
  if (with_not_recorded) item(kNotRecorded);
  out += "</p>\n";
}

// Each step's length, from the step starts (the last step's end is not known).
std::vector<int64_t> step_lengths(const Steps& steps) {
  std::vector<int64_t> out;
  for (std::size_t k = 0; k + 1 < steps.starts_ns.size(); ++k)
    out.push_back(steps.starts_ns[k + 1] - steps.starts_ns[k]);
  return out;
}

int64_t percentile(std::vector<int64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, std::size_t(p * double(values.size())))];
}

// The first process of `rank`; null for none, and for -1 (no rank).
const ProcessReport* first_of_rank(const Report& report, int rank) {
  if (rank < 0) return nullptr;
  for (const ProcessReport& p : report.processes)
    if (p.rank == rank) return &p;
  return nullptr;
}

std::string process_name(const ProcessReport& p) {
  return p.host.empty() ? rank_words(p.rank, p.pid) : fmt::format("{} ({})", rank_words(p.rank, p.pid), p.host);
}

void render_verdict(std::string& out, const Report& report) {
  out += R"(<section id="verdict"><h2>Verdict</h2>)";
  const Diagnosis& d = report.diagnosis;
  if (d.step_ns > 0)
    out += fmt::format(R"(<p class="step">Step: <b>{}</b>{}</p>)", human_duration(d.step_ns),
                       d.step_rank >= 0 ? fmt::format(", the slowest rank's (rank {})", d.step_rank) : std::string());
  if (d.causes.empty()) {
    out += report.findings.empty() ? "<p>Nothing found that slows the job down.</p>"
                                   : "<p>No root cause with a measured cost.</p>";
  } else {
    out += R"(<ol class="causes">)";
    for (const RootCause& c : d.causes) {
      out += fmt::format(R"(<li data-cause="{}"><span class="sev sev-{}">{}</span>)", escape(cause_name(c)),
                         cause_severity_name(c.severity), cause_severity_name(c.severity));
      out += c.kind == CauseKind::HiddenSync ? escape(c.operation) + " at " + location_link(c.site) : escape(c.title);
      if (c.cost_ns_per_step > 0)
        out += fmt::format(R"(: <span class="cost">{} a step ({})</span>, the step {} without it)",
                           human_duration(c.cost_ns_per_step), percent(c.share), human_duration(c.predicted_step_ns));
      if (!c.advice().empty()) out += fmt::format(R"(<p class="advice">{}</p>)", escape(c.advice()));
      if (!c.evidence.empty()) {
        out += "<details><summary>evidence</summary><ul>";
        for (const std::string& e : c.evidence) out += fmt::format("<li>{}</li>", escape(e));
        out += "</ul></details>";
      }
      out += "</li>";
    }
    out += "</ol>";
  }
  out += "</section>\n";
}

// One bar of a strip: one step, or a few consecutive ones when there are more than
// kHtmlBarsPerStrip. A bar of several stands for the mean of those the GPU timeline recorded
// (a duty-cycled timeline records one step in many), and is hatched as not recorded only when it
// recorded none of them.
struct Bar {
  int64_t first_step = 0, steps = 0, recorded = 0;
  int64_t compute = 0, communication = 0, waiting = 0, idle[kIdleCauseCount] = {}, not_recorded = 0;
  // The mean length of the steps it draws.
  int64_t step_ns() const {
    if (recorded == 0) return not_recorded / std::max<int64_t>(1, steps);
    int64_t t = compute + communication + waiting;
    for (const int64_t i : idle) t += i;
    return t / recorded;
  }
};

// waits: the rank's collective waits, null when it has none: the part of each step's
// communication that was waiting for late ranks.
std::vector<Bar> bars_of(const ProcessReport& p, const RankWaits* waits) {
  const std::vector<int64_t> lengths = step_lengths(p.sync_sites.steps);
  std::vector<const CoveredStep*> covered(lengths.size(), nullptr);
  for (const CoveredStep& s : p.gpu.steps)
    if (std::size_t(s.step) < covered.size()) covered[std::size_t(s.step)] = &s;
  const std::size_t per_bar = (lengths.size() + kHtmlBarsPerStrip - 1) / kHtmlBarsPerStrip;
  std::vector<Bar> bars;
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    if (k % per_bar == 0) bars.push_back({int64_t(k)});
    Bar& b = bars.back();
    ++b.steps;
    if (const CoveredStep* s = covered[k]) {
      ++b.recorded;
      const int64_t waited =
          waits && k < waits->waited_by_step_ns.size() ? std::min(waits->waited_by_step_ns[k], s->communication_ns) : 0;
      b.compute += s->busy_ns - s->communication_ns;
      b.communication += s->communication_ns - waited;
      b.waiting += waited;
      for (int c = 0; c < kIdleCauseCount; ++c) b.idle[c] += s->idle_by_cause_ns[c];
    } else {
      b.not_recorded += lengths[k];
    }
  }
  return bars;
}

void render_strip(std::string& out, const ProcessReport& p, const std::vector<Bar>& bars, int64_t scale_ns,
                  int straggler) {
  const GpuTimelineReport& g = p.gpu;
  out += fmt::format(R"(<div class="strip"><h3>{}{}</h3><p class="muted">)", escape(process_name(p)),
                     p.rank >= 0 && p.rank == straggler ? " &mdash; the straggler" : "");
  if (g.has_figures()) {
    const int64_t compute = g.busy_ns - g.communication_ns;
    int64_t waiting = 0;
    for (const Bar& b : bars) waiting += b.waiting;
    out +=
        fmt::format("{} steps, {} on the GPU timeline: GPU busy {} (compute {}, communication {}{}), idle {}",
                    with_thousands(int64_t(step_lengths(p.sync_sites.steps).size())), with_thousands(g.covered_steps),
                    percent(g.share(g.busy_ns)), percent(g.share(compute)), percent(g.share(g.communication_ns)),
                    waiting > 0 ? fmt::format(" of which waiting for late ranks {}", percent(g.share(waiting))) : "",
                    percent(g.share(g.idle_ns)));
    std::vector<std::pair<int64_t, int>> causes;
    for (int c = 0; c < kIdleCauseCount; ++c)
      if (g.idle_by_cause_ns[c] > 0) causes.push_back({g.idle_by_cause_ns[c], c});
    std::sort(causes.rbegin(), causes.rend());
    for (std::size_t i = 0; i < causes.size(); ++i)
      out += fmt::format("{}{} {}", i == 0 ? " (" : ", ", idle_cause_words(IdleCause(causes[i].second)),
                         percent(g.share(causes[i].first)));
    if (!causes.empty()) out += ")";
  } else {
    out += escape(g.why_none.empty() ? "no GPU timeline" : g.why_none);
  }
  out += "</p>";
  if (bars.empty()) {
    out += R"(<p class="muted">No steps found.</p></div>)";
    return;
  }
  const double width = 4;
  const double height = 100;
  out += fmt::format(
      R"(<svg data-rank="{}" data-pid="{}" data-idle-share="{:.6f}" viewBox="0 0 {} {}" preserveAspectRatio="none" role="img" aria-label="{}'s steps">)",
      rank_label(p.rank), p.pid, g.share(g.idle_ns), width * double(bars.size()), height, escape(process_name(p)));
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    // A bar longer than the strip is drawn at full height, its parts in proportion, and cut.
    const double cut = std::min(1.0, double(scale_ns) / double(std::max<int64_t>(1, b.step_ns())));
    double y = height;
    std::string rects;
    auto part = [&](const PartStyle& s, int64_t ns, int64_t steps) {
      if (ns <= 0) return;
      const double h = double(ns) / double(steps) / double(scale_ns) * height * cut;
      y -= h;
      rects += fmt::format(R"(<rect class="p-{}" x="{:.1f}" y="{:.4f}" width="{:.1f}" height="{:.4f}" fill="{}"/>)",
                           s.key, width * double(i), y, width * 0.85, h, s.colour);
    };
    if (b.recorded > 0) {
      part(kCompute, b.compute, b.recorded);
      part(kCommunication, b.communication, b.recorded);
      part(kWaiting, b.waiting, b.recorded);
      for (int c = 0; c < kIdleCauseCount; ++c) part(kIdleStyles[c], b.idle[c], b.recorded);
    } else {
      part(kNotRecorded, b.not_recorded, b.steps);
    }
    std::string steps = b.steps == 1 ? fmt::format("step {}", b.first_step)
                                     : fmt::format("steps {}-{}", b.first_step, b.first_step + b.steps - 1);
    if (b.steps > 1) steps += fmt::format(" ({} recorded)", b.recorded);
    if (cut < 1) {
      rects += fmt::format(R"(<rect class="cut" x="{:.1f}" y="8" width="{:.1f}" height="3" fill="#fff"/>)",
                           width * double(i), width * 0.85);
      out += fmt::format(R"(<g data-drawn-at="{:.6g}"><title>{}: {} a step, cut</title>{}</g>)", cut, steps,
                         human_duration(b.step_ns()), rects);
    } else {
      out += fmt::format("<g><title>{}: {} a step</title>{}</g>", steps, human_duration(b.step_ns()), rects);
    }
  }
  out += "</svg></div>";
}

// The ranks drawn in full: every one up to kHtmlStripRanks, else the straggler, the slowest, the
// most idle and rank 0 first, then the slowest others.
std::vector<const ProcessReport*> ranks_drawn(const Report& report) {
  std::vector<const ProcessReport*> all;
  for (const ProcessReport& p : report.processes) all.push_back(&p);
  if (all.size() <= kHtmlStripRanks) return all;
  std::vector<const ProcessReport*> chosen;
  auto add = [&](const ProcessReport* p) {
    if (p && chosen.size() < kHtmlStripRanks && std::find(chosen.begin(), chosen.end(), p) == chosen.end())
      chosen.push_back(p);
  };
  add(first_of_rank(report, report.waits.analysis.straggler));
  add(first_of_rank(report, report.diagnosis.step_rank));
  add(*std::max_element(all.begin(), all.end(), [](const ProcessReport* a, const ProcessReport* b) {
    return a->gpu.share(a->gpu.idle_ns) < b->gpu.share(b->gpu.idle_ns);
  }));
  add(first_of_rank(report, 0));
  std::vector<const ProcessReport*> by_step = all;
  std::stable_sort(by_step.begin(), by_step.end(), [](const ProcessReport* a, const ProcessReport* b) {
    return a->sync_sites.steps.step_ns > b->sync_sites.steps.step_ns;
  });
  for (const ProcessReport* p : by_step) add(p);
  std::sort(chosen.begin(), chosen.end());  // in the report's order: they point into its processes
  return chosen;
}

void render_steps(std::string& out, const Report& report) {
  out += R"(<section id="steps"><h2>Steps, rank by rank</h2>)";
  out += R"(<p class="muted">Each bar is a step (on long runs, the mean of the few a bar stands for that the GPU )"
         R"(timeline recorded), as tall as the step is long, split into what the GPU did: busy with compute or )"
         R"(communication, or idle and why.</p>)";
  const std::vector<const ProcessReport*> drawn = ranks_drawn(report);
  std::vector<std::vector<Bar>> bars;
  std::vector<int64_t> lengths;
  bool not_recorded = false;
  for (const ProcessReport* p : drawn) {
    bars.push_back(bars_of(*p, p->rank >= 0 ? report.waits.analysis.waits_of(p->rank) : nullptr));
    for (const Bar& b : bars.back()) {
      if (b.step_ns() > 0) lengths.push_back(b.step_ns());
      not_recorded = not_recorded || b.recorded == 0;
    }
  }
  int64_t scale_ns = 1;
  if (!lengths.empty()) {
    std::sort(lengths.begin(), lengths.end());
    // The 90th percentile by nearest rank: below 10 bars the longest, so a few bars are never cut.
    const int64_t p90 = lengths[(lengths.size() * 9 + 9) / 10 - 1];
    scale_ns = std::max(scale_ns, std::min(lengths.back(), kHtmlCutBarsAbove * p90));
  }
  legend(out, not_recorded);
  for (std::size_t i = 0; i < drawn.size(); ++i)
    render_strip(out, *drawn[i], bars[i], scale_ns, report.waits.analysis.straggler);
  if (drawn.size() < report.processes.size())
    out += fmt::format(R"(<p class="muted">{} of {} ranks drawn; every rank below.</p>)", drawn.size(),
                       report.processes.size());
  out +=
      R"(<h3>Every rank</h3><div class="wrap"><table id="rank-table"><thead><tr><th>rank</th><th class="n">steps</th>)"
      R"(<th class="n">median step</th><th class="n">p90</th><th class="n">longest</th><th class="n">GPU busy</th>)"
      R"(<th class="n">GPU idle</th><th>idle mostly</th></tr></thead><tbody>)";
  for (const ProcessReport& p : report.processes) {
    const std::vector<int64_t> lengths = step_lengths(p.sync_sites.steps);
    const GpuTimelineReport& g = p.gpu;
    std::string mostly = "&mdash;";
    if (g.idle_ns > 0) {
      const auto top = std::max_element(std::begin(g.idle_by_cause_ns), std::end(g.idle_by_cause_ns));
      mostly = idle_cause_words(IdleCause(top - std::begin(g.idle_by_cause_ns)));
    }
    out += fmt::format(
        R"(<tr data-rank="{}"><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>)",
        rank_label(p.rank), escape(process_name(p)), with_thousands(int64_t(lengths.size())),
        lengths.empty() ? "&mdash;" : human_duration(percentile(lengths, 0.5)),
        lengths.empty() ? "&mdash;" : human_duration(percentile(lengths, 0.9)),
        lengths.empty() ? "&mdash;" : human_duration(percentile(lengths, 1.0)),
        g.has_figures() ? percent(g.share(g.busy_ns)) : "&mdash;",
        g.has_figures() ? percent(g.share(g.idle_ns)) : "&mdash;", mostly);
  }
  out += "</tbody></table></div></section>\n";
}

void render_waits(std::string& out, const Report& report) {
  const CollectiveAnalysis& a = report.waits.analysis;
  if (a.matched == 0) return;
  out += R"(<section id="waits"><h2>Collective waits</h2>)";
  if (a.straggler >= 0)
    out += fmt::format("<p>Rank <b>{}</b> is the straggler: it arrives last at the collectives and the others wait "
                       "for it.</p>",
                       a.straggler);
  else out += "<p>No straggler: no one rank makes the others wait most of the time.</p>";

  // Imposed wait: what each rank's lateness cost the others after start-up, the largest drawn: the
  // quantity the straggler is judged on, so its bar is the longest (start-up skew no step repeats).
  std::vector<const RankWaits*> imposing;
  for (const RankWaits& w : a.ranks) imposing.push_back(&w);
  std::stable_sort(imposing.begin(), imposing.end(),
                   [](const RankWaits* x, const RankWaits* y) { return x->steady_imposed_ns > y->steady_imposed_ns; });
  if (imposing.size() > kHtmlHeatRows) imposing.resize(kHtmlHeatRows);
  std::sort(imposing.begin(), imposing.end(), [](const RankWaits* x, const RankWaits* y) { return x->rank < y->rank; });
  int64_t most = 1;
  for (const RankWaits* w : imposing) most = std::max(most, w->steady_imposed_ns);
  out += "<h3>Wait each rank imposed on the others after start-up (its lateness)</h3>";
  const double row = 18, label = 140, length = 600;
  out += fmt::format(
      R"(<svg class="bars" id="imposed" viewBox="0 0 {} {}" role="img" aria-label="imposed wait per rank">)",
      label + length + 90, row * double(imposing.size()) + 4);
  for (std::size_t i = 0; i < imposing.size(); ++i) {
    const RankWaits& w = *imposing[i];
    const double y = row * double(i) + 2, bar = double(w.steady_imposed_ns) / double(most) * length;
    const bool straggler = w.rank == a.straggler;
    out += fmt::format(
        R"(<g data-rank="{}" data-imposed-ns="{}"><text x="0" y="{:.0f}">rank {}{}</text>)"
        R"(<rect x="{}" y="{:.0f}" width="{:.2f}" height="{}" fill="{}"/><text x="{:.2f}" y="{:.0f}">{}</text></g>)",
        w.rank, w.steady_imposed_ns, y + 12, w.rank, straggler ? " (straggler)" : "", label, y, bar, row - 5,
        straggler ? "#c62828" : "#8c8c8c", label + bar + 6, y + 12, human_duration(w.steady_imposed_ns));
  }
  out += "</svg>";

  // The heat map: rank by step, the wait of each rank in each of its steps.
  std::vector<const RankWaits*> rows;
  for (const RankWaits& w : a.ranks)
    if (!w.waited_by_step_ns.empty()) rows.push_back(&w);
  if (rows.empty()) {
    out += "</section>\n";
    return;
  }
  if (rows.size() > kHtmlHeatRows) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const RankWaits* x, const RankWaits* y) { return x->waited_ns > y->waited_ns; });
    rows.resize(kHtmlHeatRows);
    std::sort(rows.begin(), rows.end(), [](const RankWaits* x, const RankWaits* y) { return x->rank < y->rank; });
  }
  std::size_t steps = 0;
  for (const RankWaits* w : rows) steps = std::max(steps, w->waited_by_step_ns.size());
  const std::size_t per_cell = (steps + kHtmlHeatColumns - 1) / kHtmlHeatColumns;
  const std::size_t columns = (steps + per_cell - 1) / per_cell;
  std::vector<std::vector<int64_t>> cells(rows.size(), std::vector<int64_t>(columns, 0));
  int64_t hottest = 1;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t k = 0; k < rows[r]->waited_by_step_ns.size(); ++k)
      cells[r][k / per_cell] += rows[r]->waited_by_step_ns[k];
    for (int64_t& c : cells[r]) hottest = std::max(hottest, c /= int64_t(per_cell));
  }
  out += fmt::format(
      "<h3>Wait per rank and step{}</h3>",
      rows.size() < a.ranks.size() ? fmt::format(" (the {} ranks that waited most)", rows.size()) : std::string());
  const double cell_w = std::max(3.0, 900.0 / double(columns)), cell_h = 14, left = 60;
  out += fmt::format(
      R"(<svg class="heat" id="wait-heat" viewBox="0 0 {:.0f} {:.0f}" role="img" aria-label="waits per rank and step">)",
      left + cell_w * double(columns), cell_h * double(rows.size()) + 16);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    out += fmt::format(R"(<text x="0" y="{:.0f}">rank {}</text>)", cell_h * double(r) + 11, rows[r]->rank);
    for (std::size_t c = 0; c < columns; ++c) {
      const double heat = double(cells[r][c]) / double(hottest);
      // White to deep red.
      const int green = int(235 - 200 * heat), blue = int(235 - 215 * heat);
      out += fmt::format(
          R"svg(<rect x="{:.1f}" y="{:.0f}" width="{:.1f}" height="{}" fill="rgb(250,{},{})"><title>rank {}, )svg",
          left + cell_w * double(c), cell_h * double(r), cell_w, cell_h - 1, green, blue, rows[r]->rank);
      out += per_cell == 1 ? fmt::format("step {}", c)
                           : fmt::format("steps {}-{}", c * per_cell, c * per_cell + per_cell - 1);
      out += fmt::format(": waited {} a step</title></rect>", human_duration(cells[r][c]));
    }
  }
  out += fmt::format(
      R"(<text x="{}" y="{:.0f}">step 0</text><text x="{:.0f}" y="{:.0f}" text-anchor="end">step {}</text>)", left,
      cell_h * double(rows.size()) + 13, left + cell_w * double(columns), cell_h * double(rows.size()) + 13, steps - 1);
  out += "</svg></section>\n";
}

// A sync or pageable-copy site on every rank it is on.
struct SiteRow {
  const SyncSite* site;
  std::vector<int> ranks;
  int64_t calls = 0, blocked_ns = 0, bubble_ns = 0, bubble_calls = 0, bytes = 0, steps = 0;
};

std::vector<SiteRow> merged_sites(const Report& report, std::vector<SyncSite> RankSyncs::*list) {
  std::map<std::string, SiteRow> by_identity;
  for (const ProcessReport& p : report.processes)
    for (const SyncSite& s : p.sync_sites.*list) {
      SiteRow& row = by_identity.try_emplace(site_identity(s) + site_location(s), SiteRow{&s, {}}).first->second;
      row.ranks.push_back(p.rank);
      row.calls += s.calls;
      row.blocked_ns += s.blocked_ns;
      row.bubble_ns += s.bubble_ns;
      row.bubble_calls += s.bubble_calls;
      row.bytes += s.bytes;
      row.steps += p.sync_sites.steps.count;
    }
  std::vector<SiteRow> rows;
  for (auto& [identity, row] : by_identity) rows.push_back(std::move(row));
  std::stable_sort(rows.begin(), rows.end(), [](const SiteRow& a, const SiteRow& b) {
    return std::tie(a.bubble_ns, a.blocked_ns) > std::tie(b.bubble_ns, b.blocked_ns);
  });
  return rows;
}

void render_sites(std::string& out, const Report& report) {
  out += R"(<section id="syncs"><h2>Hidden syncs, by the GPU idle time after them</h2>)";
  const std::vector<SiteRow> syncs = merged_sites(report, &RankSyncs::hidden);
  if (syncs.empty()) out += "<p>No hidden sync.</p>";
  else {
    out +=
        R"(<div class="wrap"><table><thead><tr><th>operation</th><th>where</th><th>ranks</th><th class="n">calls a step</th>)"
        R"(<th class="n">host blocked</th><th class="n">GPU idle after (bubble)</th></tr></thead><tbody>)";
    for (const SiteRow& r : syncs)
      out += fmt::format(
          R"(<tr><td>{}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>)",
          escape(r.site->classification.operation),
          source_link(r.site->file, r.site->line, r.site->function.empty() ? "" : "in " + r.site->function),
          rank_ranges(r.ranks),
          r.steps > 0 ? fmt::format("{:.1f}", double(r.calls) / double(r.steps)) : with_thousands(r.calls),
          human_duration(r.blocked_ns), r.bubble_calls > 0 ? human_duration(r.bubble_ns) : "&mdash;");
    out += "</tbody></table></div>";
  }
  const std::vector<SiteRow> copies = merged_sites(report, &RankSyncs::pageable_copies);
  out += "<h3>Copies from or to pageable memory</h3>";
  if (copies.empty()) out += "<p>None.</p>";
  else {
    out +=
        R"(<div class="wrap"><table><thead><tr><th>where</th><th>direction</th><th>ranks</th><th class="n">calls</th><th class="n">bytes</th>)"
        R"(<th class="n">host time</th></tr></thead><tbody>)";
    for (const SiteRow& r : copies)
      out += fmt::format(
          R"(<tr><td>{}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>)",
          source_link(r.site->file, r.site->line, r.site->function.empty() ? "" : "in " + r.site->function),
          direction_name(r.site->copy_direction), rank_ranges(r.ranks), with_thousands(r.calls), human_bytes(r.bytes),
          human_duration(r.blocked_ns));
    out += "</tbody></table></div>";
  }
  out += "</section>\n";
}

// A C++ kernel's name cut to what a row shows (its whole name is the cell's tooltip): the
// template arguments of a vectorized elementwise kernel run to thousands of characters.
std::string shortened(const std::string& name) {
  constexpr std::size_t kShown = 100;
  return name.size() <= kShown ? name : name.substr(0, kShown) + "\u2026";
}

void render_kernels(std::string& out, const Report& report) {
  std::map<std::string, std::pair<int64_t, int64_t>> by_name;  // count, time
  int64_t busy = 0;
  for (const ProcessReport& p : report.processes) {
    busy += p.gpu.kernels.busy_ns;
    for (const KernelTime& k : p.gpu.kernels.top) {
      auto& [count, ns] = by_name[k.name];
      count += k.count;
      ns += k.total_ns;
    }
  }
  if (by_name.empty()) return;
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> top(by_name.begin(), by_name.end());
  std::stable_sort(top.begin(), top.end(),
                   [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  if (top.size() > 10) top.resize(10);
  out +=
      R"(<section id="kernels"><h2>Top kernels</h2><div class="wrap"><table><thead><tr><th>kernel</th><th class="n">calls</th>)"
      R"(<th class="n">GPU time</th><th class="n">of GPU busy</th></tr></thead><tbody>)";
  for (const auto& [name, figures] : top)
    out += fmt::format(
        R"(<tr><td class="src" title="{}">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td></tr>)",
        escape(name), escape(shortened(name)), with_thousands(figures.first), human_duration(figures.second),
        busy > 0 ? percent(double(figures.second) / double(busy)) : "&mdash;");
  out += "</tbody></table></div></section>\n";
}

void render_setup(std::string& out, const Report& report) {
  if (report.setup.empty()) return;
  // One row per item and finding, with every rank it holds for.
  std::map<std::tuple<int, std::string, std::string, bool>, std::vector<int>> rows;
  for (const SetupItem& s : report.setup) rows[{int(s.item), s.observed, s.recommended, s.ok}].push_back(s.rank);
  out +=
      R"(<section id="setup"><h2>Setup checklist</h2><div class="wrap"><table><thead><tr><th></th><th>item</th><th>ranks</th>)"
      R"(<th>seen</th><th>recommended</th></tr></thead><tbody>)";
  for (const auto& [key, ranks] : rows) {
    const auto& [item, observed, recommended, ok] = key;
    out += fmt::format(R"(<tr class="{}"><td class="{}">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>)",
                       ok ? "item-ok" : "item-off", ok ? "ok" : "off", ok ? "&#10003;" : "&#10007;",
                       escape(kSetupItems[std::size_t(item)].words), rank_ranges(ranks), escape(observed),
                       ok ? "" : escape(recommended));
  }
  out += "</tbody></table></div></section>\n";
}

void render_lost(std::string& out, const Report& report) {
  out += R"(<section id="lost"><h2>Records lost</h2>)";
  std::string rows;
  for (const ProcessReport& p : report.processes) {
    std::vector<std::string> counts;
#define TS_LOST(column, json_key, words, meaning) \
  if (p.lost.column > 0) counts.push_back(fmt::format("{} {}", with_thousands(p.lost.column), words));
#define TS_GPU(column, json_key, words, meaning) \
  if (p.gpu.records.column > 0)                  \
    counts.push_back(fmt::format("{} GPU records {}", with_thousands(p.gpu.records.column), words));
#include "trainshim/counters.def"
    if (!counts.empty())
      rows += fmt::format("<tr><td>{}</td><td>{}</td></tr>", escape(process_name(p)),
                          escape(fmt::format("{}", fmt::join(counts, ", "))));
  }
  out += rows.empty() ? "<p>None: every record reached the database.</p>"
                      : R"(<div class="wrap"><table><thead><tr><th>process</th><th>lost</th></tr></thead><tbody>)" +
                            rows + "</tbody></table></div>";
  out += "</section>\n";
}

// A frame of the merged stacks of a hung job, and the ranks that reached it.
struct FlameNode {
  std::string frame;
  std::vector<int> ranks;
  std::vector<FlameNode> children;
};

// hangs.stacks: per rank "rank R (pid P) thread T <doing> for N s", then its Python frames
// innermost first, "    at <frame>". The path from the outermost frame to what the thread is doing
// (its duration left out: it differs between ranks doing the same).
std::vector<std::pair<int, std::vector<std::string>>> parse_stacks(const std::string& stacks) {
  std::vector<std::pair<int, std::vector<std::string>>> out;
  std::size_t at = 0;
  while (at < stacks.size()) {
    const std::size_t end = std::min(stacks.find('\n', at), stacks.size());
    const std::string line = stacks.substr(at, end - at);
    at = end + 1;
    if (line.starts_with("    at ")) {
      if (!out.empty()) out.back().second.insert(out.back().second.begin(), line.substr(7));
      continue;
    }
    int rank = -1, pid = 0, tid = 0, used = 0;
    if (std::sscanf(line.c_str(), "rank %d (pid %d) thread %d %n", &rank, &pid, &tid, &used) < 3 || used == 0) continue;
    std::string doing = line.substr(std::size_t(used));
    if (const std::size_t f = doing.rfind(" for "); f != std::string::npos && doing.ends_with(" s")) doing.resize(f);
    out.push_back({rank, {doing}});
  }
  return out;
}

int flame_depth(const FlameNode& n) {
  int depth = 0;
  for (const FlameNode& c : n.children) depth = std::max(depth, flame_depth(c));
  return depth + 1;
}

void draw_flame(std::string& out, const FlameNode& n, double x, double width, int depth, std::size_t job_ranks) {
  const double row = 20;
  const bool alone = n.ranks.size() == 1 && job_ranks > 1;
  out += fmt::format(
      R"(<g data-frame="{}" data-ranks="{}"><rect x="{:.2f}" y="{:.0f}" width="{:.2f}" height="{}" fill="{}" stroke="#fff"/>)"
      R"(<text x="{:.2f}" y="{:.0f}">{}</text><title>{} &mdash; ranks {}</title></g>)",
      escape(n.frame), rank_ranges(n.ranks), x, row * depth, width, row - 1, alone ? "#e45756" : "#f2b36f", x + 3,
      row * depth + 14,
      escape(n.frame.size() > std::size_t(width / 6.5) ? n.frame.substr(0, std::size_t(width / 6.5)) : n.frame),
      escape(n.frame), rank_ranges(n.ranks));
  double child_x = x;
  for (const FlameNode& c : n.children) {
    const double w = width * double(c.ranks.size()) / double(n.ranks.size());
    draw_flame(out, c, child_x, w, depth + 1, job_ranks);
    child_x += w;
  }
}

void render_hangs(std::string& out, const Report& report) {
  if (report.hangs.empty()) return;
  out += R"(<section id="hang"><h2>The job hung</h2>)";
  for (const HangRow& h : report.hangs) out += fmt::format("<p>{}</p>", escape(h.message));
  const auto with_stacks =
      std::find_if(report.hangs.begin(), report.hangs.end(), [](const HangRow& h) { return !h.stacks.empty(); });
  if (with_stacks != report.hangs.end()) {
    FlameNode root{"every rank sampled", {}, {}};
    for (const auto& [rank, path] : parse_stacks(with_stacks->stacks)) {
      root.ranks.push_back(rank);
      FlameNode* node = &root;
      for (const std::string& frame : path) {
        auto it = std::find_if(node->children.begin(), node->children.end(),
                               [&](const FlameNode& c) { return c.frame == frame; });
        if (it == node->children.end()) it = node->children.insert(node->children.end(), FlameNode{frame, {}, {}});
        it->ranks.push_back(rank);
        node = &*it;
      }
    }
    out += "<h3>Where each rank is, merged (a frame only one rank is in stands out in red)</h3>";
    const double width = 1200;
    out += fmt::format(
        R"(<svg class="flame" id="hang-flame" viewBox="0 0 {} {}" role="img" aria-label="stacks of the hung ranks">)",
        width, 20 * flame_depth(root));
    draw_flame(out, root, 0, width, 0, root.ranks.size());
    out += fmt::format("</svg><pre>{}</pre>", escape(with_stacks->stacks));
  }
  out += "</section>\n";
}

}  // namespace

std::string render_html(const Report& report) {
  std::string out = R"(<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">)"
                    R"(<meta name="viewport" content="width=device-width, initial-scale=1">)";
  out += fmt::format("<title>trainshim report: {}</title><style>{}</style></head><body>\n", escape(report.job), kStyle);
  out += fmt::format(
      R"(<header><h1>trainshim report</h1><p class="muted">job {} &middot; {} process{} &middot; {}</p></header>)",
      escape(report.job), report.processes.size(), report.processes.size() == 1 ? "" : "es", escape(report.database));
  out += kPatterns;
  out += "\n";
  render_verdict(out, report);
  render_hangs(out, report);
  render_steps(out, report);
  render_waits(out, report);
  render_sites(out, report);
  render_kernels(out, report);
  render_setup(out, report);
  render_lost(out, report);
  out += "</body></html>\n";
  return out;
}

}  // namespace trainshim::cli
