// The HTML report: what each picture draws from the report's figures, exactly, and that a job of
// 1,024 ranks and 10,000 steps stays a page a browser opens.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "render/report_html.hpp"

namespace trainshim::cli {
namespace {

constexpr int64_t kMs = 1'000'000;

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The <svg ...> element of rank `rank`'s strip, up to its end.
std::string strip_of(const std::string& html, int rank) {
  const std::size_t from = html.find("<svg data-rank=\"" + std::to_string(rank) + "\"");
  if (from == std::string::npos) return {};
  return html.substr(from, html.find("</svg>", from) - from);
}

// Steps of `length` from 0, `n` of them (n + 1 starts: the last step's end is known).
Steps steps_of(int64_t n, int64_t length) {
  Steps s;
  s.count = n + 1;
  for (int64_t k = 0; k <= n; ++k) s.starts_ns.push_back(k * length);
  s.step_ns = length;
  return s;
}

// A covered step of 10 ms: `busy` busy of which `communication`, the rest idle for `cause`.
CoveredStep covered(int64_t step, int64_t busy, int64_t communication, IdleCause cause) {
  CoveredStep s;
  s.step = step;
  s.ns = 10 * kMs;
  s.busy_ns = busy;
  s.communication_ns = communication;
  s.idle_by_cause_ns[int(cause)] = s.ns - busy;
  return s;
}

void add_covered(GpuTimelineReport& g, const CoveredStep& s) {
  g.steps.push_back(s);
  ++g.covered_steps;
  g.covered_ns += s.ns;
  g.busy_ns += s.busy_ns;
  g.communication_ns += s.communication_ns;
  for (int c = 0; c < kIdleCauseCount; ++c) {
    g.idle_by_cause_ns[c] += s.idle_by_cause_ns[c];
    g.idle_ns += s.idle_by_cause_ns[c];
  }
}

// Rank 0 waits for rank 1, which is starved: 4 steps of 10 ms, the third outside the GPU timeline.
Report starved_straggler() {
  Report r;
  r.job = "job<1>";
  r.database = "run.db";
  for (const int rank : {0, 1}) {
    ProcessReport& p = r.processes.emplace_back();
    p.rank = rank;
    p.pid = 100 + rank;
    p.host = "nodeA";
    p.sync_sites.steps = steps_of(4, 10 * kMs);
    for (const int64_t k : {0, 1, 3})
      add_covered(p.gpu, rank == 0 ? covered(k, 9 * kMs, 6 * kMs, IdleCause::Sync)
                                   : covered(k, 4 * kMs, 1 * kMs, IdleCause::DataLoading));
    p.gpu.kernels.busy_ns = 20 * kMs;
    p.gpu.kernels.top = {{"void gemm<float>", 30, 15 * kMs, 0.75, {}}};
  }
  r.processes[1].lost.dropped_ring_full = 12;
  r.waits.analysis.matched = 8;
  r.waits.analysis.straggler = 1;
  RankWaits w0;
  w0.rank = 0;
  w0.imposed_ns = 30 * kMs;  // late at start-up only: not what the bars draw
  w0.steady_imposed_ns = 1 * kMs;
  w0.waited_ns = 20 * kMs;
  w0.waited_by_step_ns = {5 * kMs, 5 * kMs, 5 * kMs, 5 * kMs};
  RankWaits w1;
  w1.rank = 1;
  w1.imposed_ns = 20 * kMs;
  w1.steady_imposed_ns = 20 * kMs;
  w1.waited_by_step_ns = {0, 0, 0, 0};
  r.waits.analysis.ranks = {w0, w1};
  SyncSite item;
  item.classification.operation = "Tensor.item()";
  item.file = "/src/train.py";
  item.line = 57;
  item.function = "train_step";
  item.calls = 4;
  item.blocked_ns = 2 * kMs;
  item.bubble_ns = 3 * kMs;
  item.bubble_calls = 4;
  r.processes[0].sync_sites.hidden = {item};
  r.processes[1].sync_sites.hidden = {item};
  r.setup = {{0, 100, SetupItemKind::PinnedMemory, "4 of 4 H2D copies from pageable memory", "pin_memory=True", false},
             {1, 101, SetupItemKind::PinnedMemory, "4 of 4 H2D copies from pageable memory", "pin_memory=True", false}};
  RootCause cause;
  cause.kind = CauseKind::InputPipeline;
  cause.title = "rank 1's input pipeline";
  cause.cost_ns_per_step = 5 * kMs;
  cause.share = 0.5;
  cause.predicted_step_ns = 5 * kMs;
  cause.severity = CauseSeverity::High;
  cause.remedies = {"more DataLoader workers"};
  RootCause sync;
  sync.kind = CauseKind::HiddenSync;
  sync.operation = "Tensor.item()";
  sync.site = "/src/train.py:57 in train_step";
  RootCause garbled = sync;
  garbled.site = "/src/train.py:99999999999999999999 in f";
  r.diagnosis = {10 * kMs, 1, {cause, sync, garbled}, {}};
  return r;
}

TEST(HtmlReport, StripsSplitEachStepAsTheGpuTimelineDid) {
  const std::string html = render_html(starved_straggler());
  // Rank 1's covered steps: compute 3 ms, communication 1 ms, data loading 6 ms of 10 ms, drawn
  // 100 units tall; its third step (step 2) is not recorded, hatched at its full height.
  const std::string rank_1 = strip_of(html, 1);
  ASSERT_FALSE(rank_1.empty());
  EXPECT_NE(rank_1.find(R"(data-idle-share="0.600000")"), std::string::npos) << rank_1;
  EXPECT_EQ(count(rank_1, R"(class="p-data_loading")"), 3u);
  EXPECT_EQ(count(rank_1, R"(height="60.0000" fill="#e45756")"), 3u);
  EXPECT_EQ(count(rank_1, R"(class="p-compute" x="0.0" y="70.0000" width="3.4" height="30.0000")"), 1u);
  EXPECT_EQ(count(rank_1, R"(class="p-not_recorded" x="8.0" y="0.0000" width="3.4" height="100.0000")"), 1u);
  EXPECT_EQ(count(rank_1, "p-waiting"), 0u);  // it waited for no one
  EXPECT_NE(rank_1.find("<title>step 2: 10.0 ms a step</title>"), std::string::npos);
  // Rank 0: of its 6 ms of communication a step, 5 ms waiting for rank 1.
  const std::string rank_0 = strip_of(html, 0);
  EXPECT_EQ(count(rank_0, R"(class="p-communication" x="0.0" y="60.0000" width="3.4" height="10.0000")"), 1u);
  EXPECT_EQ(count(rank_0, R"(class="p-waiting" x="0.0" y="10.0000" width="3.4" height="50.0000")"), 1u);
  EXPECT_EQ(count(rank_0, R"(class="p-sync")"), 3u);
  EXPECT_NE(html.find("rank 1 (nodeA) &mdash; the straggler"), std::string::npos);
  EXPECT_NE(html.find("3 on the GPU timeline: GPU busy 90.0&nbsp;% (compute 30.0&nbsp;%, communication 60.0&nbsp;% of "
                      "which waiting for late ranks 50.0&nbsp;%), idle 10.0&nbsp;% (sync 10.0&nbsp;%)"),
            std::string::npos);
}

// A profiler starting made one step of R7 3.47 s among steps of 50 µs on an H200: to scale, the
// others were slivers a thousandth of a unit tall. A bar over 3 times the 90th percentile's length
// is drawn at full height, its parts in proportion, cut, and says so.
TEST(HtmlReport, AFewVeryLongStepsAreDrawnCutSoTheOthersShow) {
  Report r;
  ProcessReport& p = r.processes.emplace_back();
  p.rank = 0;
  p.pid = 100;
  int64_t start = 0;
  for (int k = 0; k <= 20; ++k) {
    p.sync_sites.steps.starts_ns.push_back(start);
    start += k == 7 ? 10'000 * kMs : 10 * kMs;
  }
  p.sync_sites.steps.count = 21;
  for (int k = 0; k < 20; ++k) {
    CoveredStep s = covered(k, 6 * kMs, 0, IdleCause::DataLoading);
    if (k == 7) {
      s.ns = 10'000 * kMs;
      s.busy_ns = 1'000 * kMs;
      s.idle_by_cause_ns[int(IdleCause::DataLoading)] = 0;
      s.idle_by_cause_ns[int(IdleCause::Sync)] = 9'000 * kMs;
    }
    add_covered(p.gpu, s);
  }
  const std::string strip = strip_of(render_html(r), 0);
  ASSERT_FALSE(strip.empty());
  // The strip is 30 ms tall: a 10 ms step is a third of it.
  EXPECT_EQ(count(strip, R"(class="p-compute" x="0.0" y="80.0000" width="3.4" height="20.0000")"), 1u) << strip;
  EXPECT_EQ(count(strip, R"(height="13.3333" fill="#e45756")"), 19u);
  EXPECT_EQ(count(strip, "<g data-drawn-at"), 1u);
  const std::size_t cut = strip.find(R"(<g data-drawn-at="0.003"><title>step 7: 10.00 s a step, cut</title>)");
  ASSERT_NE(cut, std::string::npos) << strip;
  const std::string bar = strip.substr(cut, strip.find("</g>", cut) - cut);
  EXPECT_NE(bar.find(R"(class="p-compute" x="28.0" y="90.0000" width="3.4" height="10.0000")"), std::string::npos)
      << bar;
  EXPECT_NE(bar.find(R"(class="p-sync" x="28.0" y="0.0000" width="3.4" height="90.0000")"), std::string::npos) << bar;
  EXPECT_NE(bar.find(R"(class="cut")"), std::string::npos);
}

TEST(HtmlReport, WaitsVerdictSitesAndSetupDrawnFromTheReport) {
  Report r = starved_straggler();
  const std::string templated = "void at::native::elementwise_kernel<" + std::string(300, 'x') + ">";
  r.processes[0].gpu.kernels.top.push_back({templated, 2, 1 * kMs, 0.05, {}});
  const std::string html = render_html(r);
  for (const char* section : {"verdict", "steps", "waits", "syncs", "kernels", "setup", "lost"})
    EXPECT_NE(html.find(std::string("<section id=\"") + section + "\""), std::string::npos) << section;
  EXPECT_EQ(html.find("<section id=\"hang\""), std::string::npos) << "no hang, no hang section";
  // The straggler's bar is the longest: 600 units for 20 ms imposed after start-up, rank 0's 30
  // for 1 ms (its 30 ms at start-up left out, as the straggler's judgement leaves them out).
  EXPECT_NE(html.find(R"(<g data-rank="1" data-imposed-ns="20000000"><text x="0" y="32">rank 1 (straggler)</text>)"
                      R"(<rect x="140" y="20" width="600.00")"),
            std::string::npos);
  EXPECT_NE(html.find(R"(<g data-rank="0" data-imposed-ns="1000000"><text x="0" y="14">rank 0</text>)"
                      R"(<rect x="140" y="2" width="30.00")"),
            std::string::npos);
  // The heat map: rank 0's 5 ms in each of its 4 steps, the hottest red; rank 1's none, white.
  EXPECT_EQ(count(html, R"x(fill="rgb(250,35,20)"><title>rank 0, step )x"), 4u);
  EXPECT_EQ(count(html, R"x(fill="rgb(250,235,235)"><title>rank 1, step )x"), 4u);
  // The verdict, the sync site once for both ranks, linked to its file, the checklist once.
  EXPECT_NE(html.find("<span class=\"sev sev-high\">high</span>rank 1&apos;s input pipeline"), std::string::npos)
      << html.substr(html.find("<section id=\"verdict\""), 600);
  // A hidden sync's cause: its operation, then its site linked; a line number that is none stays words.
  EXPECT_NE(
      html.find(R"(Tensor.item() at <a class="src" href="file:///src/train.py">/src/train.py:57</a> in train_step)"),
      std::string::npos);
  EXPECT_NE(html.find("Tensor.item() at /src/train.py:99999999999999999999 in f"), std::string::npos);
  EXPECT_NE(html.find(R"x(<span class="cost">5.0 ms a step (50.0&nbsp;%)</span>, the step 5.0 ms without it)x"),
            std::string::npos);
  EXPECT_EQ(count(html, R"(<a class="src" href="file:///src/train.py">/src/train.py:57</a> in train_step)"), 2u)
      << "in the verdict and once in the table of sites";
  EXPECT_NE(html.find("<td>0-1</td><td class=\"n\">0.8</td><td class=\"n\">4.0 ms</td><td class=\"n\">6.0 ms</td>"),
            std::string::npos);
  EXPECT_EQ(count(html, "pinned memory for input copies"), 1u);
  // Text from the recording is escaped.
  EXPECT_NE(html.find("void gemm&lt;float&gt;"), std::string::npos);
  // A long templated kernel's name cut to 100 characters, whole in its tooltip.
  EXPECT_NE(html.find("title=\"void at::native::elementwise_kernel&lt;" + std::string(300, 'x') +
                      "&gt;\">void "
                      "at::native::elementwise_kernel&lt;" +
                      std::string(64, 'x') + "\u2026</td>"),
            std::string::npos);
  EXPECT_NE(html.find("<title>trainshim report: job&lt;1&gt;</title>"), std::string::npos);
  EXPECT_NE(html.find("<td>rank 1 (nodeA)</td><td>12 ring full</td>"), std::string::npos);
  // Nothing fetched: no script, no external reference.
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"((src|href)="https?:)")));
}

TEST(HtmlReport, AHangsStacksMergeIntoOneFlameGraphWhereTheMissingRankStandsOut) {
  Report r = starved_straggler();
  HangRow hang;
  hang.message = "ncclAllReduce #5: ranks 0,2 waiting for 30 s; rank 1 never entered it";
  hang.stacks =
      "rank 0 (pid 100) thread 100 sleeping in futex for 30 s\n"
      "    at all_reduce (/lib/dist.py:9)\n    at train_step (/job/train.py:40)\n    at main (/job/train.py:70)\n"
      "rank 1 (pid 101) thread 101 sleeping in poll for 25 s\n"
      "    at poll_queue (/job/worker.py:12)\n    at main (/job/train.py:66)\n"
      "rank 2 (pid 102) thread 102 sleeping in futex for 31 s\n"
      "    at all_reduce (/lib/dist.py:9)\n    at train_step (/job/train.py:40)\n    at main (/job/train.py:70)";
  r.hangs = {hang};
  const std::string html = render_html(r);
  ASSERT_NE(html.find("<section id=\"hang\""), std::string::npos);
  auto frame = [&](const std::string& name, const std::string& ranks) {
    const std::size_t at = html.find("<g data-frame=\"" + name + "\" data-ranks=\"" + ranks + "\">");
    return at == std::string::npos ? std::string() : html.substr(at, html.find("</g>", at) - at);
  };
  EXPECT_NE(frame("every rank sampled", "0-2"), "");
  // Outermost first, a row each, down to what the thread is doing.
  EXPECT_NE(frame("main (/job/train.py:70)", "0, 2").find(R"(y="20")"), std::string::npos);
  EXPECT_NE(frame("train_step (/job/train.py:40)", "0, 2").find(R"(y="40")"), std::string::npos);
  EXPECT_NE(frame("all_reduce (/lib/dist.py:9)", "0, 2").find(R"(y="60")"), std::string::npos);
  EXPECT_NE(frame("sleeping in futex", "0, 2").find(R"(y="80")"), std::string::npos);
  EXPECT_NE(frame("main (/job/train.py:70)", "0, 2"), "");
  EXPECT_NE(frame("train_step (/job/train.py:40)", "0, 2"), "");
  // Ranks 0 and 2 in the same futex wait whatever its length; rank 1 alone, in red.
  EXPECT_NE(frame("sleeping in futex", "0, 2"), "");
  EXPECT_NE(frame("main (/job/train.py:66)", "1").find("fill=\"#e45756\""), std::string::npos);
  EXPECT_NE(frame("sleeping in poll", "1").find("fill=\"#e45756\""), std::string::npos);
  EXPECT_EQ(frame("sleeping in futex", "0, 2").find("#e45756"), std::string::npos);
}

// 1,024 ranks of 10,000 steps, the GPU timeline on for one step in ten: a page under 10 MB with
// 16 strips of at most 300 bars, the heat map of the 32 ranks that waited most and a row for every rank.
TEST(HtmlReport, AThousandRanksOfTenThousandStepsStayUnderTenMegabytes) {
  Report r;
  r.job = "big";
  r.waits.analysis.matched = 30'000;
  r.waits.analysis.straggler = 777;
  for (int rank = 0; rank < 1024; ++rank) {
    ProcessReport& p = r.processes.emplace_back();
    p.rank = rank;
    p.pid = 1000 + rank;
    p.sync_sites.steps = steps_of(10'000, 10 * kMs);
    for (int64_t k = 0; k < 10'000; k += 10)
      add_covered(p.gpu, covered(k, (rank == 777 ? 4 : 8) * kMs, 2 * kMs, IdleCause::DataLoading));
    RankWaits& w = r.waits.analysis.ranks.emplace_back();
    w.rank = rank;
    w.imposed_ns = w.steady_imposed_ns = rank == 777 ? 9'000 * kMs : rank * kMs;
    w.waited_ns = rank == 777 ? 0 : int64_t(rank) * 10'000;
    w.waited_by_step_ns.assign(10'000, rank == 777 ? 0 : rank);
  }
  const std::string html = render_html(r);
  EXPECT_LT(html.size(), 10u << 20);
  EXPECT_EQ(count(html, "<svg data-rank="), kHtmlStripRanks);
  EXPECT_NE(html.find("<svg data-rank=\"777\""), std::string::npos) << "the straggler is drawn";
  EXPECT_EQ(count(html, "<tr data-rank="), 1024u);
  // 295 bars of 34 steps (the last of 4, none of them recorded: 294 with compute).
  EXPECT_EQ(count(html, "<g><title>steps "), kHtmlStripRanks * 295);
  EXPECT_EQ(count(html, R"(<rect class="p-compute")"), kHtmlStripRanks * 294);
  // A bar of several steps is the mean of those recorded (6 ms compute of 10 ms); one that
  // recorded none is hatched.
  EXPECT_EQ(count(html, "<g><title>steps 0-33 (4 recorded): 10.0 ms a step</title><rect class=\"p-compute\" "
                        "x=\"0.0\" y=\"40.0000\" width=\"3.4\" height=\"60.0000\""),
            kHtmlStripRanks - 1)
      << "every strip but the straggler's";
  EXPECT_EQ(count(html, "<g><title>steps 9996-9999 (0 recorded): 10.0 ms a step</title><rect class=\"p-not_recorded\""),
            kHtmlStripRanks);
  EXPECT_EQ(count(html, "<title>rank "), kHtmlHeatRows * kHtmlHeatColumns);
  EXPECT_EQ(count(html, "<title>rank 1023, steps 0-49: waited"), 1u);
  EXPECT_EQ(count(html, "<title>rank 992, steps"), kHtmlHeatColumns) << "the 32 that waited most: 992 to 1023";
  EXPECT_EQ(count(html, "<title>rank 991, steps"), 0u);
  EXPECT_EQ(count(html, "data-imposed-ns="), kHtmlHeatRows);
}

}  // namespace
}  // namespace trainshim::cli
