// `trainshim diff`: two reports built by hand (no database), compared site by site and rank by rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "diagnose/diff.hpp"
#include "diagnose/report_model.hpp"
#include "render/diff_render.hpp"
#include "text/text_layout.hpp"

namespace trainshim::cli {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSteps = 100;
constexpr int64_t kStepNs = 100 * kMs;
constexpr int64_t kSpanNs = kSteps * kStepNs;  // 10 s: 1 % of the span is 100 ms

SyncSite site(const std::string& operation, int line, const std::string& source, int64_t calls, int64_t blocked_ns,
              SyncKind kind = SyncKind::Hidden, const std::string& function = "train_step") {
  SyncSite s;
  s.classification.operation = operation;
  s.classification.key = operation == "Tensor.item()" ? "item" : "key of " + operation;
  s.classification.kind = kind;
  s.file = "/src/train.py";
  s.function = function;
  s.source = source;
  s.line = line;
  s.calls = calls;
  s.blocked_ns = blocked_ns;
  return s;
}

ProcessReport process(int rank, int64_t pid, std::vector<SyncSite> sites, int64_t steps = kSteps) {
  ProcessReport p;
  p.rank = rank;
  p.pid = pid;
  p.host = "node1";
  p.sync_sites.steps.count = steps;
  p.sync_sites.steps.step_ns = steps ? kSpanNs / steps : 0;
  p.sync_sites.span_ns = kSpanNs;
  for (auto& s : sites)
    (s.classification.kind == SyncKind::Hidden ? p.sync_sites.hidden : p.sync_sites.explicit_).push_back(std::move(s));
  return p;
}

RankWaits waits(int rank, int64_t collectives, int64_t waited_ns, int64_t last_count) {
  RankWaits w{};
  w.rank = rank;
  w.collectives = collectives;
  w.waited_ns = waited_ns;
  w.last_count = last_count;
  return w;
}

// A: before. Rank 0 copies 200 MiB from pageable memory (2 MiB per step); rank 1 waits 2 ms per step.
Report run_a() {
  Report r;
  r.job = "jobA";
  r.database = "a.db";
  ProcessReport p0 =
      process(0, 100,
              {
                  site("Tensor.item()", 57, "loss_val = loss.item()", 100, 500 * kMs),  // moves to line 60
                  site("nonzero()", 80, "idx = mask.nonzero()", 100, 300 * kMs),        // 1.0 -> 2.0 per step
                  site("Tensor.cpu()", 90, "x = t.cpu()", 100, 500 * kMs),              // 5 % -> 12 %
                  site("torch.cuda.synchronize()", 71, "torch.cuda.synchronize()", 100, 200 * kMs, SyncKind::Explicit),
              });
  p0.copies.push_back({Direction::HostToDevice, HostMemory::Pageable, 100, 200 * 1048576, 50 * kMs});
  p0.copies.push_back({Direction::HostToDevice, HostMemory::Pinned, 100, 999 * 1048576, 5 * kMs});
  r.processes.push_back(std::move(p0));
  r.processes.push_back(
      process(1, 101,
              {
                  site("Tensor.item()", 57, "loss_val = loss.item()", 100, 500 * kMs),  // 1.0 -> 1.05: unchanged
                  site("Tensor.tolist()", 40, "ids = out.tolist()", 200, 400 * kMs),    // 2.0 -> 1.0, 4 % -> 2 %
                  site("Tensor.numpy()", 45, "a = t.numpy()", 100, 200 * kMs),          // 1.0 -> 0.5 but 2 % -> 6 %
              }));
  r.waits.analysis.matched = 300;
  r.waits.analysis.ranks = {waits(0, 300, 10 * kMs, 150), waits(1, 300, 200 * kMs, 150)};
  return r;
}

// B: after.
Report run_b() {
  Report r;
  r.job = "jobB";
  r.database = "b.db";
  r.processes.push_back(process(1, 201,
                                {
                                    site("Tensor.item()", 57, "loss_val = loss.item()", 105, 500 * kMs),
                                    site("Tensor.tolist()", 40, "ids = out.tolist()", 100, 200 * kMs),
                                    site("Tensor.numpy()", 45, "a = t.numpy()", 50, 600 * kMs),
                                }));
  ProcessReport p0 = process(0, 200,
                             {
                                 site("Tensor.item()", 60, "  loss_val = loss.item()  ", 100, 500 * kMs),
                                 site("nonzero()", 80, "idx = mask.nonzero()", 200, 350 * kMs),
                                 site("Tensor.cpu()", 90, "x = t.cpu()", 100, 1200 * kMs),
                                 site("Tensor.item()", 99, "acc = correct.item()", 100, 900 * kMs),
                             });
  p0.copies.push_back({Direction::HostToDevice, HostMemory::Pinned, 100, 100 * 1048576, 5 * kMs});
  r.processes.push_back(std::move(p0));  // out of rank order: the diff orders them itself
  r.waits.analysis.matched = 300;
  r.waits.analysis.ranks = {waits(0, 300, 8 * kMs, 290), waits(1, 300, 3000 * kMs, 10)};
  r.waits.analysis.straggler = 0;
  return r;
}

const SiteDiff& find_site(const RunDiff& d, int rank, const std::string& operation, const std::string& source) {
  const auto it = std::find_if(d.sites.begin(), d.sites.end(), [&](const SiteDiff& s) {
    return s.rank == rank && s.operation == operation && s.source == source;
  });
  if (it == d.sites.end()) throw std::runtime_error("no site " + operation + " on rank " + std::to_string(rank));
  return *it;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(DiffSiteKey, IgnoresTheLineAndSurroundingBlanksButNotTheText) {
  const SyncSite a = site("Tensor.item()", 57, "loss_val = loss.item()", 1, 1);
  EXPECT_EQ(site_identity(a), site_identity(site("Tensor.item()", 60, " loss_val = loss.item()\t", 9, 9)));
  EXPECT_NE(site_identity(a), site_identity(site("Tensor.item()", 57, "acc = correct.item()", 1, 1)));
  EXPECT_NE(site_identity(a), site_identity(site("Tensor.cpu()", 57, "loss_val = loss.item()", 1, 1)));
  EXPECT_NE(site_identity(a),
            site_identity(site("Tensor.item()", 57, "loss_val = loss.item()", 1, 1, SyncKind::Hidden, "eval")));
  SyncSite other_file = a;
  other_file.file = "/src/eval.py";
  EXPECT_NE(site_identity(a), site_identity(other_file));
  // Fields never run into each other.
  EXPECT_NE(site_identity(site("ab", 1, "c", 1, 1)), site_identity(site("a", 1, "bc", 1, 1)));
}

TEST(DiffSiteKey, ARewordedOperationIsTheSameSite) {
  const SyncSite a = site("Tensor.item()", 57, "loss_val = loss.item()", 1, 1);
  SyncSite reworded = a;
  reworded.classification.operation = "Tensor.item() (reads one value)";
  EXPECT_EQ(site_identity(reworded), site_identity(a));
  EXPECT_EQ(site_identity(a), "item\x1f/src/train.py\x1ftrain_step\x1floss_val = loss.item()");
  // trainshim-baseline/1 files hold the words.
  EXPECT_EQ(worded_site_identity(a), "Tensor.item()\x1f/src/train.py\x1ftrain_step\x1floss_val = loss.item()");
  EXPECT_NE(worded_site_identity(reworded), worded_site_identity(a));
}

TEST(DiffSites, StatusesAndFigures) {
  const RunDiff d = diff_reports(run_a(), run_b());
  ASSERT_EQ(d.sites.size(), 8u);

  // Only in B: appeared.
  const SiteDiff& appeared = find_site(d, 0, "Tensor.item()", "acc = correct.item()");
  EXPECT_EQ(appeared.status, SiteStatus::Appeared);
  EXPECT_FALSE(appeared.a.present);
  EXPECT_TRUE(appeared.b.present);
  EXPECT_EQ(appeared.b.line, 99);
  EXPECT_DOUBLE_EQ(appeared.rate_a, 0);
  EXPECT_DOUBLE_EQ(appeared.rate_b, 1.0);
  EXPECT_DOUBLE_EQ(appeared.b.share, 0.09);
  EXPECT_EQ(appeared.b.blocked_ns, 900 * kMs);

  // Only in A: disappeared, and marked explicit.
  const SiteDiff& gone = find_site(d, 0, "torch.cuda.synchronize()", "torch.cuda.synchronize()");
  EXPECT_EQ(gone.status, SiteStatus::Disappeared);
  EXPECT_EQ(gone.kind, SyncKind::Explicit);
  EXPECT_TRUE(gone.a.present);
  EXPECT_FALSE(gone.b.present);
  EXPECT_EQ(gone.a.blocked_ns, 200 * kMs);
  EXPECT_DOUBLE_EQ(gone.a.share, 0.02);

  // The same file, function and text at another line: the same site, unchanged.
  const SiteDiff& moved = find_site(d, 0, "Tensor.item()", "loss_val = loss.item()");
  EXPECT_EQ(moved.status, SiteStatus::Unchanged);
  EXPECT_EQ(moved.a.line, 57);
  EXPECT_EQ(moved.b.line, 60);
  EXPECT_EQ(moved.kind, SyncKind::Hidden);
  EXPECT_EQ(std::count_if(d.sites.begin(), d.sites.end(),
                          [](const SiteDiff& s) { return s.rank == 0 && s.operation == "Tensor.item()"; }),
            2);

  // 1.0 -> 2.0 calls per step, share 3 % -> 3.5 %: more frequent.
  const SiteDiff& frequent = find_site(d, 0, "nonzero()", "idx = mask.nonzero()");
  EXPECT_EQ(frequent.status, SiteStatus::MoreFrequent);
  EXPECT_EQ(frequent.unit, RateUnit::Step);
  EXPECT_DOUBLE_EQ(frequent.rate_a, 1.0);
  EXPECT_DOUBLE_EQ(frequent.rate_b, 2.0);
  EXPECT_DOUBLE_EQ(*frequent.a.per_step, 1.0);
  EXPECT_DOUBLE_EQ(*frequent.b.per_step, 2.0);
  EXPECT_DOUBLE_EQ(frequent.a.per_second, 10.0);
  EXPECT_DOUBLE_EQ(frequent.b.per_second, 20.0);
  EXPECT_EQ(frequent.a.calls, 100);
  EXPECT_EQ(frequent.b.calls, 200);

  // Same calls, blocked share 5 % -> 12 %: costlier.
  const SiteDiff& costlier = find_site(d, 0, "Tensor.cpu()", "x = t.cpu()");
  EXPECT_EQ(costlier.status, SiteStatus::Costlier);
  EXPECT_DOUBLE_EQ(costlier.a.share, 0.05);
  EXPECT_DOUBLE_EQ(costlier.b.share, 0.12);
  EXPECT_EQ(costlier.a.blocked_ns, 500 * kMs);
  EXPECT_EQ(costlier.b.blocked_ns, 1200 * kMs);
  EXPECT_DOUBLE_EQ(costlier.rate_a, 1.0);
  EXPECT_DOUBLE_EQ(costlier.rate_b, 1.0);

  // 1.0 -> 1.05 per step: 5 %, under 10 %.
  EXPECT_EQ(find_site(d, 1, "Tensor.item()", "loss_val = loss.item()").status, SiteStatus::Unchanged);
  // 2.0 -> 1.0 per step and 4 % -> 2 %: less frequent (both better, the frequency says why).
  EXPECT_EQ(find_site(d, 1, "Tensor.tolist()", "ids = out.tolist()").status, SiteStatus::LessFrequent);
  // 1.0 -> 0.5 per step but 2 % -> 6 %: the blocked time decides, costlier.
  EXPECT_EQ(find_site(d, 1, "Tensor.numpy()", "a = t.numpy()").status, SiteStatus::Costlier);

  // Appeared, disappeared, worse first; then better, then unchanged.
  std::vector<std::string> order;
  for (const auto& s : d.sites) order.push_back(status_name(s.status));
  EXPECT_EQ(order, (std::vector<std::string>{"appeared", "disappeared", "costlier", "costlier", "more_frequent",
                                             "less_frequent", "unchanged", "unchanged"}));
  // Among the worse, the largest change of share first: 7 points (rank 0) before 4 points (rank 1).
  EXPECT_EQ(d.sites[2].rank, 0);
  EXPECT_EQ(d.sites[3].rank, 1);

  EXPECT_EQ(d.summary.appeared, 1);
  EXPECT_EQ(d.summary.disappeared, 1);
  EXPECT_EQ(d.summary.worse, 3);
  EXPECT_EQ(d.summary.better, 1);
  EXPECT_EQ(d.summary.unchanged, 2);
}

TEST(DiffSites, ThresholdsAtTheirEdges) {
  auto status = [](int64_t calls_a, int64_t blocked_a, int64_t calls_b, int64_t blocked_b) {
    Report a, b;
    a.processes.push_back(process(0, 1, {site("Tensor.item()", 1, "x.item()", calls_a, blocked_a)}));
    b.processes.push_back(process(0, 2, {site("Tensor.item()", 1, "x.item()", calls_b, blocked_b)}));
    return status_name(diff_reports(a, b).sites.at(0).status);
  };
  // Share: exactly 1 point (100 ms of 10 s) is not a change; a nanosecond more is.
  EXPECT_EQ(status(100, 500 * kMs, 100, 600 * kMs), "unchanged");
  EXPECT_EQ(status(100, 500 * kMs, 100, 600 * kMs + 1000), "costlier");
  EXPECT_EQ(status(100, 500 * kMs, 100, 390 * kMs), "cheaper");
  // Rate: 0.04 -> 0.08 per step is +100 % but only 0.04 absolute.
  EXPECT_EQ(status(4, 0, 8, 0), "unchanged");
  // 10.0 -> 10.9 per step is 0.9 absolute but 9 %.
  EXPECT_EQ(status(1000, 0, 1090, 0), "unchanged");
  EXPECT_EQ(status(1000, 0, 1110, 0), "more_frequent");
  EXPECT_EQ(status(100, 0, 80, 0), "less_frequent");
  // More calls and more blocked time: the frequency is named.
  EXPECT_EQ(status(100, 500 * kMs, 200, 1000 * kMs), "more_frequent");
  // More calls but less blocked time: cheaper.
  EXPECT_EQ(status(100, 500 * kMs, 200, 300 * kMs), "cheaper");
}

// The fix halved the step (50 -> 25 ms): the item() blocks 10 ms a step in both runs, 20 % of A's
// step and 40 % of B's. Its cost is unchanged, not costlier, and the diff leads with a faster job.
TEST(DiffSites, AShareOfAShorterStepIsNoCost) {
  Report a, b;
  a.processes.push_back(process(0, 1, {site("Tensor.item()", 1, "x.item()", 200, 2000 * kMs)}, /*steps=*/200));
  b.processes.push_back(process(0, 2, {site("Tensor.item()", 1, "x.item()", 400, 4000 * kMs)}, /*steps=*/400));
  const RunDiff d = diff_reports(a, b);
  ASSERT_EQ(d.sites.size(), 1u);
  EXPECT_DOUBLE_EQ(d.sites[0].a.share, 0.2);
  EXPECT_DOUBLE_EQ(d.sites[0].b.share, 0.4);
  EXPECT_DOUBLE_EQ(d.sites[0].a.blocked_per_unit_ns, 10.0 * kMs);
  EXPECT_DOUBLE_EQ(d.sites[0].b.blocked_per_unit_ns, 10.0 * kMs);
  EXPECT_EQ(d.sites[0].status, SiteStatus::Unchanged);
  EXPECT_EQ(d.summary.worse, 0);
  EXPECT_EQ(d.summary.step_ns_a, 50 * kMs);
  EXPECT_EQ(d.summary.step_ns_b, 25 * kMs);
  const auto lines = lines_of(render_diff_text(d));
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[3], "Step (the slowest rank's): 50.0 ms -> 25.0 ms (-50.0 %, faster)");
  EXPECT_EQ(lines.back(), "step 50.0 ms -> 25.0 ms (-50.0 %, faster); 0 sites appeared, 0 disappeared, 0 got worse");
  // 10 -> 12 ms a step of a 50 ms step: +20 % and 2 ms, past 1 % of the step: costlier.
  b.processes[0] = process(0, 2, {site("Tensor.item()", 1, "x.item()", 200, 2400 * kMs)}, /*steps=*/200);
  EXPECT_EQ(diff_reports(a, b).sites.at(0).status, SiteStatus::Costlier);
}

TEST(DiffSites, RatesPerSecondWhenARunHasNoSteps) {
  Report a, b;
  a.processes.push_back(process(0, 1, {site("Tensor.item()", 1, "x.item()", 100, 0)}));
  b.processes.push_back(process(0, 2, {site("Tensor.item()", 1, "x.item()", 300, 0)}, /*steps=*/0));
  const RunDiff d = diff_reports(a, b);
  ASSERT_EQ(d.sites.size(), 1u);
  const SiteDiff& s = d.sites[0];
  EXPECT_EQ(s.unit, RateUnit::Second);
  EXPECT_DOUBLE_EQ(s.rate_a, 10.0);  // 100 calls in 10 s
  EXPECT_DOUBLE_EQ(s.rate_b, 30.0);
  EXPECT_DOUBLE_EQ(*s.a.per_step, 1.0);
  EXPECT_FALSE(s.b.per_step.has_value());
  EXPECT_EQ(s.status, SiteStatus::MoreFrequent);
  EXPECT_EQ(d.ranks.at(0).unit, RateUnit::Second);
  const Json j = render_diff_json(d);
  EXPECT_EQ(j["sites"][0]["rate_unit"], "second");
  EXPECT_TRUE(j["sites"][0]["b"]["per_step"].is_null());
  EXPECT_NE(render_diff_text(d).find("10.00/s"), std::string::npos);
}

TEST(DiffSites, SameTextOnTwoLinesIsOneSite) {
  Report a, b;
  a.processes.push_back(process(0, 1,
                                {site("Tensor.item()", 10, "v = x.item()", 100, 100 * kMs),
                                 site("Tensor.item()", 20, "v = x.item()", 100, 300 * kMs)}));
  b.processes.push_back(process(0, 2, {site("Tensor.item()", 12, "v = x.item()", 100, 100 * kMs)}));
  const RunDiff d = diff_reports(a, b);
  ASSERT_EQ(d.sites.size(), 1u);
  EXPECT_EQ(d.sites[0].a.calls, 200);
  EXPECT_EQ(d.sites[0].a.blocked_ns, 400 * kMs);
  EXPECT_EQ(d.sites[0].a.line, 20);  // the one that blocked longest
  EXPECT_EQ(d.sites[0].b.line, 12);
  EXPECT_EQ(d.sites[0].status, SiteStatus::LessFrequent);
}

TEST(DiffSites, RankOnlyInOneRunAndUnrankedProcessesPairInOrder) {
  Report a, b;
  a.processes.push_back(process(-1, 7, {site("Tensor.item()", 1, "x.item()", 100, 0)}));
  a.processes.push_back(process(-1, 8, {site("Tensor.cpu()", 1, "x.cpu()", 100, 0)}));
  b.processes.push_back(process(-1, 70, {site("Tensor.item()", 1, "x.item()", 100, 0)}));
  b.processes.push_back(process(-1, 80, {site("Tensor.cpu()", 1, "x.cpu()", 100, 0)}));
  b.processes.push_back(process(3, 90, {site("Tensor.cpu()", 1, "x.cpu()", 100, 0)}));
  const RunDiff d = diff_reports(a, b);
  ASSERT_EQ(d.ranks.size(), 3u);
  EXPECT_EQ(d.ranks[0].rank, 3);
  EXPECT_FALSE(d.ranks[0].a.present);
  EXPECT_EQ(d.ranks[1].rank, -1);
  EXPECT_EQ(d.ranks[1].a.pid, 7);
  EXPECT_EQ(d.ranks[1].b.pid, 70);
  EXPECT_EQ(d.ranks[2].b.pid, 80);
  EXPECT_EQ(d.summary.appeared, 1);
  EXPECT_EQ(d.summary.unchanged, 2);
  EXPECT_EQ(d.sites[0].rank, 3);
  EXPECT_EQ(d.sites[0].status, SiteStatus::Appeared);
  EXPECT_NE(render_diff_text(d).find("only in B"), std::string::npos);
}

TEST(DiffRanks, WaitsStragglerAndPageableBytes) {
  const RunDiff d = diff_reports(run_a(), run_b());
  ASSERT_EQ(d.ranks.size(), 2u);
  EXPECT_EQ(d.straggler_a, -1);
  EXPECT_EQ(d.straggler_b, 0);

  const RankDiff& r0 = d.ranks[0];
  EXPECT_EQ(r0.rank, 0);
  EXPECT_EQ(r0.a.pid, 100);
  EXPECT_EQ(r0.b.pid, 200);
  EXPECT_FALSE(r0.a.straggler);
  EXPECT_TRUE(r0.b.straggler);
  EXPECT_DOUBLE_EQ(r0.a.last_fraction, 0.5);
  EXPECT_DOUBLE_EQ(r0.b.last_fraction, 290.0 / 300.0);
  EXPECT_EQ(r0.a.pageable_bytes, 200 * 1048576);  // the pinned copy does not count
  EXPECT_EQ(r0.b.pageable_bytes, 0);
  EXPECT_DOUBLE_EQ(r0.pageable_a, 2097152.0);
  EXPECT_DOUBLE_EQ(r0.pageable_b, 0.0);
  EXPECT_EQ(r0.pageable, Change::Less);
  EXPECT_DOUBLE_EQ(r0.wait_a, 0.1 * kMs);
  EXPECT_EQ(r0.wait, Change::Same);  // 100 -> 80 µs per step: under 1 ms

  const RankDiff& r1 = d.ranks[1];
  EXPECT_EQ(r1.rank, 1);
  EXPECT_EQ(r1.unit, RateUnit::Step);
  EXPECT_DOUBLE_EQ(r1.wait_a, 2.0 * kMs);
  EXPECT_DOUBLE_EQ(r1.wait_b, 30.0 * kMs);
  EXPECT_DOUBLE_EQ(*r1.a.wait_per_step_ns, 2.0 * kMs);
  EXPECT_DOUBLE_EQ(*r1.b.wait_per_step_ns, 30.0 * kMs);
  EXPECT_DOUBLE_EQ(r1.a.wait_per_second_ns, 20.0 * kMs);
  EXPECT_EQ(r1.a.waited_ns, 200 * kMs);
  EXPECT_EQ(r1.b.waited_ns, 3000 * kMs);
  EXPECT_EQ(r1.wait, Change::More);
  EXPECT_EQ(r1.pageable, Change::Same);
  EXPECT_DOUBLE_EQ(r1.b.last_fraction, 10.0 / 300.0);
}

RootCause measured_cause(const std::string& identity, int64_t cost, int64_t step) {
  RootCause c;
  c.identity = identity;
  c.title = identity + " title";
  c.cost_ns_per_step = cost;
  c.predicted_step_ns = step - cost;
  return c;
}

// The causes of each run's "What to fix first", matched by identity: costing 1 % of a step or more
// is having it; worse or better beyond 10 % of A's cost and 1 % of A's step; unmeasured ones left out.
TEST(DiffCauses, FixedNewWorseBetterAndTheReportsStep) {
  Report a = run_a(), b = run_b();
  a.diagnosis.step_ns = 50 * kMs;
  b.diagnosis.step_ns = 20 * kMs;
  RootCause advice;
  advice.identity = "setup_pinned_memory rank -1";
  a.diagnosis.causes = {measured_cause("input_pipeline rank 1", 30 * kMs, 50 * kMs),
                        measured_cause("hidden_sync: item", 5 * kMs, 50 * kMs),
                        measured_cause("pageable_input rank -1", 2 * kMs, 50 * kMs),
                        measured_cause("straggler rank 0", 400'000, 50 * kMs), advice};
  b.diagnosis.causes = {measured_cause("hidden_sync: item", 6 * kMs, 20 * kMs),
                        measured_cause("pageable_input rank -1", 1 * kMs, 20 * kMs),
                        measured_cause("input rank 0", 3 * kMs, 20 * kMs)};
  const RunDiff d = diff_reports(a, b);
  EXPECT_EQ(d.summary.step_ns_a, 50 * kMs);
  EXPECT_EQ(d.summary.step_ns_b, 20 * kMs);
  std::vector<std::string> seen;
  for (const CauseDiff& c : d.causes)
    seen.push_back(status_name(c.status) + " " + c.identity + " " + std::to_string(c.cost_a) + " " +
                   std::to_string(c.cost_b));
  EXPECT_EQ(seen, (std::vector<std::string>{"fixed input_pipeline rank 1 30000000 0", "new input rank 0 0 3000000",
                                            "worse hidden_sync: item 5000000 6000000",
                                            "better pageable_input rank -1 2000000 1000000"}));
  EXPECT_EQ(d.causes[0].title, "input_pipeline rank 1 title");
  EXPECT_EQ(d.summary.causes_fixed, 1);
  EXPECT_EQ(d.summary.causes_new, 1);
  EXPECT_EQ(d.summary.causes_worse, 1);
  EXPECT_EQ(d.summary.causes_better, 1);
  const std::string text = render_diff_text(d);
  EXPECT_NE(text.find("Step (the slowest rank's): 50.0 ms -> 20.0 ms (-60.0 %, faster)\n\nRoot causes: what each "
                      "costs the job's step, A and B\n  fixed        30.0 ms         -  input_pipeline rank 1 title\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("causes: 1 fixed, 1 new, 1 worse, 1 better; "), std::string::npos) << text;
  const Json json = render_diff_json(d);
  EXPECT_EQ(json["causes"][1]["status"], "new");
  EXPECT_EQ(json["causes"][1]["cost_ns_per_step_b"], 3 * kMs);
  EXPECT_EQ(json["summary"]["causes_fixed"], 1);
}

TEST(DiffRender, Json) {
  const Json j = render_diff_json(diff_reports(run_a(), run_b()));
  std::vector<std::string> top;
  for (const auto& [k, v] : j.items()) top.push_back(k);
  EXPECT_EQ(top, (std::vector<std::string>{"format", "a", "b", "thresholds", "sites", "causes", "ranks", "summary"}));
  EXPECT_EQ(j["format"], "trainshim-diff/1");
  EXPECT_EQ(j["a"]["job"], "jobA");
  EXPECT_EQ(j["b"]["database"], "b.db");
  EXPECT_TRUE(j["a"]["straggler"].is_null());
  EXPECT_EQ(j["b"]["straggler"], 0);
  EXPECT_DOUBLE_EQ(j["thresholds"]["rate_relative"].get<double>(), 0.10);
  EXPECT_DOUBLE_EQ(j["thresholds"]["rate_absolute"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(j["thresholds"]["share_points"].get<double>(), 0.01);

  const Json& appeared = j["sites"][0];
  std::vector<std::string> fields;
  for (const auto& [k, v] : appeared.items()) fields.push_back(k);
  EXPECT_EQ(fields, (std::vector<std::string>{"status", "rank", "kind", "operation", "file", "function", "source",
                                              "rate_unit", "rate_a", "rate_b", "a", "b"}));
  EXPECT_EQ(appeared["status"], "appeared");
  EXPECT_EQ(appeared["rank"], 0);
  EXPECT_EQ(appeared["kind"], "hidden");
  EXPECT_EQ(appeared["operation"], "Tensor.item()");
  EXPECT_EQ(appeared["source"], "acc = correct.item()");
  EXPECT_EQ(appeared["rate_unit"], "step");
  EXPECT_TRUE(appeared["a"].is_null());
  fields.clear();
  for (const auto& [k, v] : appeared["b"].items()) fields.push_back(k);
  EXPECT_EQ(fields, (std::vector<std::string>{"line", "calls", "per_step", "per_second", "blocked_ns",
                                              "blocked_per_unit_ns", "share_of_step"}));
  EXPECT_EQ(appeared["b"]["line"], 99);
  EXPECT_EQ(appeared["b"]["blocked_ns"], 900 * kMs);
  EXPECT_DOUBLE_EQ(appeared["b"]["per_step"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(appeared["b"]["share_of_step"].get<double>(), 0.09);

  const Json& gone = j["sites"][1];
  EXPECT_EQ(gone["status"], "disappeared");
  EXPECT_EQ(gone["kind"], "explicit");
  EXPECT_TRUE(gone["b"].is_null());

  const Json& r1 = j["ranks"][1];
  fields.clear();
  for (const auto& [k, v] : r1.items()) fields.push_back(k);
  EXPECT_EQ(fields, (std::vector<std::string>{"rank", "rate_unit", "wait_ns_a", "wait_ns_b", "wait_change",
                                              "pageable_bytes_a", "pageable_bytes_b", "pageable_change", "a", "b"}));
  EXPECT_EQ(r1["rank"], 1);
  EXPECT_DOUBLE_EQ(r1["wait_ns_a"].get<double>(), 2e6);
  EXPECT_DOUBLE_EQ(r1["wait_ns_b"].get<double>(), 3e7);
  EXPECT_EQ(r1["wait_change"], "more");
  fields.clear();
  for (const auto& [k, v] : r1["a"].items()) fields.push_back(k);
  EXPECT_EQ(fields, (std::vector<std::string>{"pid", "steps", "step_ns", "span_ns", "collectives", "waited_ns",
                                              "wait_per_step_ns", "wait_per_second_ns", "last_count", "last_fraction",
                                              "straggler", "pageable_bytes", "pageable_bytes_per_step",
                                              "pageable_bytes_per_second"}));
  EXPECT_EQ(r1["b"]["waited_ns"], 3000 * kMs);
  EXPECT_EQ(j["ranks"][0]["b"]["straggler"], true);
  EXPECT_EQ(j["ranks"][0]["pageable_change"], "less");

  EXPECT_EQ(j["summary"], Json::parse(R"({"appeared": 1, "disappeared": 1, "worse": 3, "better": 1, "unchanged": 2,
                            "step_ns_a": 100000000, "step_ns_b": 100000000, "causes_fixed": 0, "causes_new": 0,
                            "causes_worse": 0, "causes_better": 0, "line": "step 100.0 ms -> 100.0 ms (+0.0 %); 1 site appeared, 1 disappeared, 3 got worse"})"));
}

TEST(DiffRender, TextTableOrderAndSummaryLine) {
  const std::string text = render_diff_text(diff_reports(run_a(), run_b()));
  const auto lines = lines_of(text);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "step 100.0 ms -> 100.0 ms (+0.0 %); 1 site appeared, 1 disappeared, 3 got worse");

  auto first_line_with = [&](const std::string& needle) {
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (lines[i].find(needle) != std::string::npos) return int(i);
    return -1;
  };
  const int appeared = first_line_with("  appeared ");
  const int disappeared = first_line_with("  disappeared ");
  const int costlier = first_line_with("  costlier ");
  const int more = first_line_with("  more_frequent ");
  const int less = first_line_with("  less_frequent ");
  const int unchanged = first_line_with("  unchanged ");
  ASSERT_GE(appeared, 0);
  EXPECT_LT(appeared, disappeared);
  EXPECT_LT(disappeared, costlier);
  EXPECT_LT(costlier, more);
  EXPECT_LT(more, less);
  EXPECT_LT(less, unchanged);

  EXPECT_NE(lines[std::size_t(appeared)].find("Tensor.item()"), std::string::npos);
  EXPECT_NE(lines[std::size_t(appeared)].find("9.0 %"), std::string::npos);
  EXPECT_NE(lines[std::size_t(appeared) + 1].find("at /src/train.py:99 in train_step: acc = correct.item()"),
            std::string::npos);
  EXPECT_NE(lines[std::size_t(disappeared)].find("explicit"), std::string::npos);
  EXPECT_NE(text.find("at /src/train.py:60 (A: line 57) in train_step: loss_val = loss.item()"), std::string::npos);
  EXPECT_NE(lines[std::size_t(costlier)].find("5.0 %"), std::string::npos);
  EXPECT_NE(lines[std::size_t(costlier)].find("12.0 %"), std::string::npos);
  EXPECT_NE(lines[std::size_t(more)].find("1.00"), std::string::npos);
  EXPECT_NE(lines[std::size_t(more)].find("2.00"), std::string::npos);

  int rank1 = -1;  // the rank rows start with the rank; the site rows with their status
  for (std::size_t i = 0; i < lines.size() && rank1 < 0; ++i)
    if (lines[i].starts_with("  1 ")) rank1 = int(i);
  ASSERT_GE(rank1, 0);
  EXPECT_NE(lines[std::size_t(rank1)].find("2.0 ms"), std::string::npos);
  EXPECT_NE(lines[std::size_t(rank1)].find("30.0 ms"), std::string::npos);
  EXPECT_NE(lines[std::size_t(rank1)].find("waits more"), std::string::npos);
  EXPECT_NE(text.find("became the straggler, fewer pageable copies"), std::string::npos);
}

// The operation column takes the longest name, up to 48 columns; a longer one is cut with "…", so
// every row's figures stay under their headings.
TEST(DiffRender, TheSitesTableStaysAlignedWhateverTheOperationsLength) {
  RunDiff d = diff_reports(run_a(), run_b());
  ASSERT_GE(d.sites.size(), 3u);
  d.sites[0].operation = "cudaStreamSynchronize() in an unknown library";
  d.sites[1].operation = "cudaStreamSynchronize() in libsome_vendor_extension_with_a_long_name.so";
  const auto lines = lines_of(render_diff_text(d));
  const auto header = std::find_if(lines.begin(), lines.end(),
                                   [](const std::string& l) { return l.starts_with("  status        rank"); });
  ASSERT_NE(header, lines.end());
  const std::size_t width = display_width(*header);
  std::size_t rows = 0;
  for (auto row = header + 1; row != lines.end() && !row->empty(); ++row) {
    if (row->starts_with("      at ")) continue;
    EXPECT_EQ(display_width(*row), width) << *row;
    ++rows;
  }
  EXPECT_EQ(rows, d.sites.size());
  const std::string text = render_diff_text(d);
  EXPECT_NE(text.find(" cudaStreamSynchronize() in an unknown library "), std::string::npos);
  EXPECT_NE(text.find(" cudaStreamSynchronize() in… "), std::string::npos) << text;
}

TEST(DiffRender, SummaryLineWords) {
  DiffSummary s;
  s.appeared = 3;
  s.disappeared = 1;
  s.worse = 2;
  EXPECT_EQ(summary_line(s), "3 sites appeared, 1 disappeared, 2 got worse");
  EXPECT_EQ(summary_line(DiffSummary{}), "0 sites appeared, 0 disappeared, 0 got worse");
  const std::string empty = render_diff_text(diff_reports(Report{}, Report{}));
  EXPECT_NE(empty.find("no sync sites in either run"), std::string::npos);
  EXPECT_EQ(lines_of(empty).back(), "0 sites appeared, 0 disappeared, 0 got worse");
}

}  // namespace
}  // namespace trainshim::cli
