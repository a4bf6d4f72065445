// Findings grouped into root causes, each once, costed on the ranks' step breakdowns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "diagnose/findings.hpp"
#include "diagnose/report_model.hpp"
#include "diagnose/root_causes.hpp"

namespace trainshim::cli {
namespace {

constexpr int64_t kMs = 1'000'000, kUs = 1'000;
const std::string kItem = "/src/train.py:66 in main";
const std::string kUpload = "/src/train.py:60 in main";

Finding finding(FindingKind kind, int rank, const std::string& message, const std::string& site = "",
                const std::string& operation = "") {
  Finding f;
  f.kind = kind;
  f.rank = rank;
  f.message = message;
  f.remedies = {"advice for " + message};
  f.site = site;
  f.operation = operation;
  return f;
}

Finding pageable_finding(int rank, Direction direction, const std::string& message) {
  Finding f = finding(FindingKind::PageableCopy, rank, message, "",
                      direction == Direction::HostToDevice ? "pageable H2D copy" : "pageable D2H copy");
  f.copy_direction = direction;
  return f;
}

Finding setup_finding(SetupItemKind item, int rank, const std::string& message) {
  Finding f = finding(FindingKind::Setup, rank, message);
  f.setup_item = item;
  return f;
}

SyncSite site_at(int line, const std::string& operation, const std::string& rule) {
  SyncSite s;
  s.file = "/src/train.py";
  s.line = line;
  s.function = "main";
  s.classification.operation = operation;
  s.classification.rule = rule;
  return s;
}

SyncSite upload_site() { return site_at(60, "Tensor.to('cuda') / .cuda() (blocking upload)", "upload"); }
SyncSite item_site() { return site_at(66, "Tensor.item()", "item"); }

// Ten steps of 100 ms from t = 1 s, a call of hidden site `site` blocked `ns` in each, and one
// before the first step (start-up) blocked `startup_ns`.
void block_in_every_step(ProcessReport& p, std::size_t site, int64_t ns, int64_t startup_ns) {
  std::vector<int64_t>& starts = p.sync_sites.steps.starts_ns;
  starts.clear();
  for (int k = 0; k <= 10; ++k) starts.push_back(1000 * kMs + k * 100 * kMs);
  p.sync_sites.steps.count = 10;
  p.sync_sites.calls.push_back({0, startup_ns, 1, SiteKind::HiddenSync, site});
  for (int k = 0; k < 10; ++k) {
    const int64_t begin = starts[k] + 50 * kMs;
    p.sync_sites.calls.push_back({begin, begin + ns, 1, SiteKind::HiddenSync, site});
  }
}

ProcessReport rank(int r, std::vector<StepShare> parts) {
  ProcessReport p;
  p.rank = r;
  p.step_breakdown = StepBreakdown{true, 10, 0, 100 * kMs, std::move(parts)};
  p.sync_sites.hidden.push_back(upload_site());
  return p;
}

// Two ranks of a 100 ms step. Rank 1 is the straggler, waiting 45 ms a step for its input; rank 0
// waits 50 ms for it in the all-reduce. Both call item() at line 66 (3 and 2 ms of bubble); rank 0
// uploads from pageable memory at line 60 (4 ms in the copies, 1 ms after the upload).
Report job() {
  Report r;
  r.processes.push_back(rank(0, {{StepPart::WaitingForStraggler, "", 1, 50 * kMs, 0.5},
                                 {StepPart::Compute, "", -1, 37 * kMs, 0.37},
                                 {StepPart::PageableCopy, "", -1, 4 * kMs, 0.04},
                                 {StepPart::Sync, kItem, -1, 3 * kMs, 0.03},
                                 {StepPart::Sync, kUpload, -1, 1 * kMs, 0.01},
                                 {StepPart::LaunchBound, "", -1, 5 * kMs, 0.05}}));
  r.processes.push_back(rank(1, {{StepPart::Input, "", -1, 45 * kMs, 0.45},
                                 {StepPart::Compute, "", -1, 48 * kMs, 0.48},
                                 {StepPart::Sync, kItem, -1, 2 * kMs, 0.02},
                                 {StepPart::LaunchBound, "", -1, 5 * kMs, 0.05}}));
  r.waits.analysis.straggler = 1;
  r.findings = {finding(FindingKind::Straggler, 1, "rank 1 arrives last"),
                finding(FindingKind::HiddenSync, 0, "rank 0: item", kItem, "Tensor.item()"),
                finding(FindingKind::DataStarvation, 1, "rank 1: GPU idle for input"),
                pageable_finding(0, Direction::HostToDevice, "rank 0 copied H2D from pageable memory"),
                finding(FindingKind::HiddenSync, 1, "rank 1: item", kItem, "Tensor.item()"),
                finding(FindingKind::HiddenSync, 0, "rank 0: blocking upload", kUpload,
                        "Tensor.to('cuda') / .cuda() (blocking upload)"),
                finding(FindingKind::InputBound, 1, "rank 1: main thread waits for the DataLoader"),
                pageable_finding(0, Direction::DeviceToHost, "rank 0 copied D2H into pageable memory"),
                setup_finding(SetupItemKind::PinnedMemory, -1, "pinned memory: off"),
                finding(FindingKind::Fp32Gemm, 0, "rank 0: FP32 GEMMs"),
                finding(FindingKind::Hang, 1, "rank 1 never arrived")};
  return r;
}

const RootCause& cause(const Diagnosis& d, const std::string& kind) {
  const auto it =
      std::find_if(d.causes.begin(), d.causes.end(), [&](const RootCause& c) { return cause_name(c) == kind; });
  EXPECT_NE(it, d.causes.end()) << kind;
  return *it;
}

TEST(RootCauses, TheStragglersInputIsOneCauseCostedOnEveryRanksStep) {
  const Diagnosis d = diagnose(job());
  EXPECT_EQ(d.step_ns, 100 * kMs);
  const RootCause& input = cause(d, "input_pipeline");
  EXPECT_EQ(&input, &d.causes.front());
  EXPECT_EQ(input.rank, 1);
  EXPECT_EQ(input.ranks, (std::vector<int>{0, 1}));
  // Rank 1 without its input wait: 55 ms; rank 0 without waiting for it: 50 ms.
  EXPECT_EQ(input.predicted_step_ns, 55 * kMs);
  EXPECT_EQ(input.cost_ns_per_step, 45 * kMs);
  EXPECT_DOUBLE_EQ(input.share, 0.45);
  EXPECT_STREQ(cause_severity_name(input.severity), "high");
  EXPECT_EQ(input.evidence, (std::vector<std::string>{"rank 1 arrives last", "rank 1: GPU idle for input",
                                                      "rank 1: main thread waits for the DataLoader"}));
  EXPECT_EQ(input.advice(), "advice for rank 1: GPU idle for input");
}

// A finding is as severe as the cause it is evidence of, whatever its kind: the straggler's
// finding is high with its input pipeline, a sync medium with its line, a setup item advice.
TEST(RootCauses, EachFindingTakesItsCausesSeverity) {
  const Report r = job();
  const Diagnosis d = diagnose(r);
  ASSERT_EQ(d.finding_severity.size(), r.findings.size());
  for (std::size_t i = 0; i < r.findings.size(); ++i) {
    SCOPED_TRACE(r.findings[i].message);
    const auto owner = std::find_if(d.causes.begin(), d.causes.end(), [&](const RootCause& c) {
      return c.title == r.findings[i].message ||
             std::find(c.evidence.begin(), c.evidence.end(), r.findings[i].message) != c.evidence.end();
    });
    ASSERT_NE(owner, d.causes.end());
    EXPECT_EQ(d.finding_severity[i], owner->severity);
  }
  EXPECT_EQ(d.finding_severity[0], CauseSeverity::High);    // rank 1 arrives last
  EXPECT_EQ(d.finding_severity[1], CauseSeverity::Medium);  // rank 0's item(), 2 ms of 100
}

// The pinning is said once: under the pageable uploads' cause where there is one, else as the input
// pipeline's second remedy.
TEST(RootCauses, PinningIsAdvisedUnderItsOwnCauseNotAgainUnderTheInputPipeline) {
  Report r = job();
  const std::string loader = "more DataLoader workers";
  const std::string both = loader + "; " + std::string(kPinAfterLoadingRemedy);
  for (Finding& f : r.findings)
    if (f.kind == FindingKind::DataStarvation) f.remedies = {loader, std::string(kPinAfterLoadingRemedy)};
  EXPECT_EQ(cause(diagnose(r), "input_pipeline").advice(), loader);
  // No pageable copy, blocking upload or pinned-memory item: no such cause.
  std::erase_if(r.findings, [](const Finding& f) {
    return f.kind == FindingKind::PageableCopy || f.kind == FindingKind::Setup ||
           f.operation == "Tensor.to('cuda') / .cuda() (blocking upload)";
  });
  const Diagnosis without = diagnose(r);
  ASSERT_TRUE(std::none_of(without.causes.begin(), without.causes.end(),
                           [](const RootCause& c) { return c.kind == CauseKind::PageableInput; }));
  EXPECT_EQ(cause(without, "input_pipeline").advice(), both);
}

// The item() of both ranks is one cause; its cost is its bubbles, never the wait before them.
TEST(RootCauses, ASyncLineOnEveryRankIsOneCauseCostedByItsBubbles) {
  const Diagnosis d = diagnose(job());
  const RootCause& item = cause(d, "hidden_sync");
  EXPECT_EQ(item.title, "Tensor.item() at " + kItem);
  EXPECT_EQ(item.site, kItem);
  EXPECT_EQ(item.operation, "Tensor.item()");
  EXPECT_EQ(item.evidence, (std::vector<std::string>{"rank 0: item", "rank 1: item"}));
  EXPECT_EQ(item.ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(item.predicted_step_ns, 98 * kMs);
  EXPECT_EQ(item.cost_ns_per_step, 2 * kMs);
  EXPECT_STREQ(cause_severity_name(item.severity), "medium");
  EXPECT_EQ(std::count_if(d.causes.begin(), d.causes.end(),
                          [](const RootCause& c) { return c.kind == CauseKind::HiddenSync; }),
            1);
}

// Without the item() the host no longer waits in it: its time blocked there in the steps leaves
// the step with the bubbles (a call at start-up is no part of it), down to the GPU's own work.
TEST(RootCauses, ASyncAlsoCostsTheHostsTimeBlockedInItDownToTheGpusWork) {
  Report r = job();
  for (ProcessReport& p : r.processes) {
    p.sync_sites.hidden.push_back(item_site());
    block_in_every_step(p, 1, 6 * kMs, 500 * kMs);
  }
  // Rank 0: 100 - 3 - 6 = 91 ms; rank 1: 100 - 2 - 6 = 92 ms.
  EXPECT_EQ(cause(diagnose(r), "hidden_sync").predicted_step_ns, 92 * kMs);
  EXPECT_EQ(cause(diagnose(r), "hidden_sync").cost_ns_per_step, 8 * kMs);
  // Blocked 80 ms a step: each rank keeps its compute (37 and 48 ms).
  for (ProcessReport& p : r.processes) {
    p.sync_sites.calls.clear();
    block_in_every_step(p, 1, 80 * kMs, 0);
  }
  EXPECT_EQ(cause(diagnose(r), "hidden_sync").predicted_step_ns, 48 * kMs);
}

// Pinned, non-blocking uploads take the copies' time and the host's time blocked in the uploads
// off the step; the GPU's idle time after an upload stays (the host launches the same work next).
TEST(RootCauses, PinningBuysTheCopiesAndTheBlockedUploadsNotTheLaunchesAfterThem) {
  Report r = job();
  // Rank 0 sets the pace: it waits for no one, and rank 1's step is 90 ms.
  r.processes[0].step_breakdown->parts[0].ns_per_step = 0;
  r.processes[1].step_breakdown->step_ns = 90 * kMs;
  block_in_every_step(r.processes[0], 0, 2 * kMs, 0);
  const Diagnosis d = diagnose(r);
  const RootCause& pageable = cause(d, "pageable_input");
  EXPECT_EQ(pageable.predicted_step_ns, 94 * kMs);  // 100 - 4 in copies - 2 blocked
  EXPECT_EQ(pageable.cost_ns_per_step, 6 * kMs);
}

// A cause on the straggler other than its input shortens the others' waits for it too: rank 1's
// item() alone (rank 0 has no bubble there) buys its 2 ms, and rank 0 waits 2 ms less.
TEST(RootCauses, ACauseOnTheStragglerShortensTheOthersWaitsForIt) {
  Report r = job();
  r.processes[0].step_breakdown->parts[3].ns_per_step = 0;  // rank 0's bubble at the item() line
  const Diagnosis d = diagnose(r);
  const RootCause& item = cause(d, "hidden_sync");
  EXPECT_EQ(item.predicted_step_ns, 98 * kMs);
  EXPECT_EQ(item.cost_ns_per_step, 2 * kMs);
  EXPECT_EQ(item.ranks, (std::vector<int>{0, 1}));
}

// Steps of the given lengths from t = 1 s on process `p`, its collectives' waits in each.
void steps_of(Report& r, std::size_t p, const std::vector<int64_t>& lengths, const std::vector<int64_t>& waited) {
  ProcessReport& process = r.processes[p];
  std::vector<int64_t>& starts = process.sync_sites.steps.starts_ns;
  starts = {1000 * kMs};
  for (const int64_t ns : lengths) starts.push_back(starts.back() + ns);
  process.sync_sites.steps.count = int64_t(lengths.size());
  RankWaits waits;
  waits.rank = process.rank;
  waits.waited_by_step_ns = waited;
  r.waits.analysis.ranks.push_back(waits);
}

// The ranks take turns setting the pace: rank 0's own work is 100 ms in the even steps and 60 in
// the odd ones, rank 1's 90 in every step (70 of it on the GPU, 10 in an item() bubble). Rank 1
// waits 10 ms in the even steps, rank 0 30 in the odd ones: 95 ms a step. Without the item(),
// the odd steps take 80 ms and the even ones still 100: 5 ms a step, where the ranks' mean steps
// (95 ms each) would say nothing, and rank 1's own 10 ms would say too much.
TEST(RootCauses, ACauseBuysTheStepsItsRankSetsThePaceIn) {
  Report r;
  r.processes.push_back(rank(0, {{StepPart::Compute, "", -1, 60 * kMs, 0.63},
                                 {StepPart::WaitingForPeers, "", -1, 15 * kMs, 0.16},
                                 {StepPart::LaunchBound, "", -1, 20 * kMs, 0.21}}));
  r.processes.push_back(rank(1, {{StepPart::Compute, "", -1, 70 * kMs, 0.74},
                                 {StepPart::WaitingForPeers, "", -1, 5 * kMs, 0.05},
                                 {StepPart::Sync, kItem, -1, 10 * kMs, 0.105},
                                 {StepPart::LaunchBound, "", -1, 10 * kMs, 0.105}}));
  for (ProcessReport& p : r.processes) p.step_breakdown->step_ns = 95 * kMs;
  std::vector<int64_t> lengths, waited_0, waited_1;
  for (int step = 0; step < 10; ++step) {
    lengths.push_back(step % 2 ? 90 * kMs : 100 * kMs);
    waited_0.push_back(step % 2 ? 30 * kMs : 0);
    waited_1.push_back(step % 2 ? 0 : 10 * kMs);
  }
  steps_of(r, 0, lengths, waited_0);
  steps_of(r, 1, lengths, waited_1);
  r.findings = {finding(FindingKind::HiddenSync, 1, "rank 1: item", kItem, "Tensor.item()")};
  const Diagnosis d = diagnose(r);
  const RootCause& item = cause(d, "hidden_sync");
  EXPECT_EQ(item.cost_ns_per_step, 5 * kMs);
  EXPECT_EQ(item.predicted_step_ns, 90 * kMs);
  EXPECT_EQ(item.ranks, (std::vector<int>{0, 1}));  // rank 0 waits 5 ms less a step
}

// A starved rank waits for its input in one step of four (50 ms; 20 ms of GPU work in each): its
// 7.5 ms of input wait a step come off the steps that ran long, all of it, where spread evenly
// over the four they would buy 1.9 ms.
TEST(RootCauses, ACausesTimeComesOffTheStepsThatRanLong) {
  Report r;
  r.processes.push_back(
      rank(-1, {{StepPart::Compute, "", -1, 20 * kMs, 0.73}, {StepPart::Input, "", -1, 7500 * kUs, 0.27}}));
  r.processes[0].step_breakdown->step_ns = 27500 * kUs;
  std::vector<int64_t> lengths;
  for (int step = 0; step < 12; ++step) lengths.push_back(step % 4 ? 20 * kMs : 50 * kMs);
  steps_of(r, 0, lengths, std::vector<int64_t>(lengths.size(), 0));
  r.findings = {finding(FindingKind::DataStarvation, -1, "the GPU idle for input")};
  const Diagnosis d = diagnose(r);
  const RootCause& input = cause(d, "input");
  EXPECT_EQ(input.cost_ns_per_step, 7500 * kUs);
  EXPECT_EQ(input.predicted_step_ns, 20 * kMs);
}

// Uploads from pageable memory, the blocking upload and the checklist item are one cause; on a
// rank that does not set the job's pace, fixing it buys nothing yet, and it says so.
TEST(RootCauses, PageableInputIsOneCauseWithItsChecklistItem) {
  const Diagnosis d = diagnose(job());
  const RootCause& pageable = cause(d, "pageable_input");
  EXPECT_EQ(pageable.evidence, (std::vector<std::string>{"rank 0 copied H2D from pageable memory",
                                                         "rank 0: blocking upload", "pinned memory: off"}));
  EXPECT_EQ(pageable.ranks, (std::vector<int>{0}));
  EXPECT_EQ(pageable.predicted_step_ns, 100 * kMs);
  EXPECT_EQ(pageable.cost_ns_per_step, 0);
  EXPECT_STREQ(cause_severity_name(pageable.severity), "low");
  EXPECT_EQ(pageable.advice(), "advice for pinned memory: off");
}

// Pinning takes the host's staging copies of pageable uploads off its path (a job that sets its own
// pace: one rank): 60 ms of H2D copies within 10 steps buy 6 ms a step; where the GPU's idle time in
// the copies is longer, that time is what pinning buys; copies outside the steps (start-up) buy nothing.
TEST(RootCauses, PinningSavesTheHostsTimeInPageableUploadsWithinTheSteps) {
  Report r;
  r.processes.push_back(rank(0, {{StepPart::Input, "", -1, 20 * kMs, 0.20},
                                 {StepPart::Compute, "", -1, 70 * kMs, 0.70},
                                 {StepPart::PageableCopy, "", -1, 4 * kMs, 0.04},
                                 {StepPart::LaunchBound, "", -1, 6 * kMs, 0.06}}));
  RankSyncs& syncs = r.processes[0].sync_sites;
  for (int k = 0; k <= 10; ++k) syncs.steps.starts_ns.push_back(1000 * kMs + k * 100 * kMs);
  syncs.steps.count = 10;
  syncs.pageable_upload_ns_in_steps = 60 * kMs;
  r.findings = {pageable_finding(0, Direction::HostToDevice, "rank 0 copied H2D from pageable memory")};
  EXPECT_EQ(cause(diagnose(r), "pageable_input").predicted_step_ns, 94 * kMs);
  EXPECT_EQ(cause(diagnose(r), "pageable_input").cost_ns_per_step, 6 * kMs);
  r.processes[0].step_breakdown->parts[2].ns_per_step = 8 * kMs;
  EXPECT_EQ(cause(diagnose(r), "pageable_input").predicted_step_ns, 92 * kMs);
  r.processes[0].step_breakdown->parts[2].ns_per_step = 0;
  syncs.pageable_upload_ns_in_steps = 0;
  EXPECT_EQ(cause(diagnose(r), "pageable_input").cost_ns_per_step, 0);
}

// Every finding is in exactly one cause; those with no step part stand alone, a hang first.
TEST(RootCauses, EveryFindingOnceTheRestAlone) {
  const Report r = job();
  const Diagnosis d = diagnose(r);
  std::size_t grouped = 0, alone = 0;
  for (const RootCause& c : d.causes) {
    grouped += c.evidence.size();
    alone += c.evidence.empty();
  }
  EXPECT_EQ(grouped + alone, r.findings.size());
  const RootCause& hang = cause(d, "hang");
  EXPECT_STREQ(cause_severity_name(hang.severity), "high");
  EXPECT_STREQ(cause_severity_name(cause(d, "fp32_gemm").severity), "advice");
  EXPECT_EQ(cause(d, "pageable_copy").title, "rank 0 copied D2H into pageable memory");
  // By cost, then severity: the hang leads the causes that cost the step nothing measured.
  std::vector<std::string> order;
  for (const RootCause& c : d.causes) order.push_back(cause_name(c));
  EXPECT_EQ(order, (std::vector<std::string>{"input_pipeline", "hidden_sync", "hang", "pageable_input", "pageable_copy",
                                             "fp32_gemm"}));
}

// A straggler late for another reason than its input loses as much as the others waited for it
// (50 ms), at least its time launching; without the GPU timeline, its lateness alone.
TEST(RootCauses, AStragglerWithoutInputWaitLosesItsLateness) {
  Report r = job();
  std::erase_if(r.findings, [](const Finding& f) {
    return f.kind == FindingKind::DataStarvation || f.kind == FindingKind::InputBound;
  });
  r.processes[1].step_breakdown->parts = {{StepPart::LaunchBound, "", -1, 60 * kMs, 0.60},
                                          {StepPart::Compute, "", -1, 40 * kMs, 0.40}};
  Diagnosis d = diagnose(r);
  EXPECT_EQ(cause(d, "straggler").title, "rank 1 comes late to the collectives");
  EXPECT_EQ(cause(d, "straggler").predicted_step_ns, 50 * kMs);  // rank 0 without its wait
  r.processes[1].step_breakdown =
      StepBreakdown{false, 10, 0, 100 * kMs, {{StepPart::NotToldApart, "", -1, 100 * kMs, 1}}};
  d = diagnose(r);
  EXPECT_EQ(cause(d, "straggler").predicted_step_ns, 50 * kMs);
  EXPECT_EQ(cause(d, "straggler").cost_ns_per_step, 50 * kMs);
  EXPECT_STREQ(cause_severity_name(cause(d, "straggler").severity), "high");
}

// A process no launcher started (no rank, no straggler): its input findings are its input pipeline.
TEST(RootCauses, AOneProcessJobsInputIsACause) {
  Report r;
  r.processes.push_back(
      rank(-1, {{StepPart::Input, "", -1, 60 * kMs, 0.6}, {StepPart::Compute, "", -1, 40 * kMs, 0.4}}));
  r.findings = {finding(FindingKind::DataStarvation, -1, "the GPU idle for input"),
                finding(FindingKind::InputBound, -1, "the main thread waits")};
  const Diagnosis d = diagnose(r);
  ASSERT_EQ(d.causes.size(), 1u);
  EXPECT_EQ(d.causes[0].kind, CauseKind::Input);
  EXPECT_EQ(d.causes[0].title, "the input pipeline");
  EXPECT_EQ(d.causes[0].evidence, (std::vector<std::string>{"the GPU idle for input", "the main thread waits"}));
  EXPECT_EQ(d.causes[0].predicted_step_ns, 40 * kMs);
  EXPECT_STREQ(cause_severity_name(d.causes[0].severity), "high");
}

// Without steps nothing is costed: every cause is advice, a hang still high.
TEST(RootCauses, WithoutStepsNothingIsCosted) {
  Report r = job();
  for (ProcessReport& p : r.processes) p.step_breakdown.reset();
  const Diagnosis d = diagnose(r);
  EXPECT_EQ(d.step_ns, 0);
  for (const RootCause& c : d.causes) {
    EXPECT_EQ(c.cost_ns_per_step, 0) << cause_name(c);
    EXPECT_EQ(c.predicted_step_ns, 0) << cause_name(c);
    EXPECT_STREQ(cause_severity_name(c.severity), cause_name(c) == "hang" ? "high" : "advice") << cause_name(c);
  }
}

TEST(RootCauses, OneRanksReportKeepsTheCausesThatTouchIt) {
  Report r = job();
  r.diagnosis = diagnose(r);
  ASSERT_TRUE(keep_only_rank(r, 1));
  for (const RootCause& c : r.diagnosis.causes) EXPECT_NE(c.kind, CauseKind::PageableInput);
  EXPECT_EQ(r.diagnosis.causes.front().kind, CauseKind::InputPipeline);
}

}  // namespace
}  // namespace trainshim::cli
