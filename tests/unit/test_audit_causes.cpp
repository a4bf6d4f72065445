// The audit's cause_share rule on hand-made diagnoses: each costly root cause fails once on every
// rank whose step it lengthens; a sync at an allowed site, a cheap cause and an unmeasured one never.
// blocked_share and wait_share on parts of the step breakdown, which never overlap.
// And the baseline's sites, matched on the operation's key, or on its words in a /1 file.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "diagnose/audit.hpp"

namespace trainshim::cli {
namespace {

constexpr int64_t kMs = 1'000'000;

RootCause cause(CauseKind kind, const std::string& title, int64_t cost, std::vector<int> ranks) {
  RootCause c;
  c.kind = kind;
  c.title = title;
  c.cost_ns_per_step = cost;
  c.share = double(cost) / double(50 * kMs);
  c.predicted_step_ns = 50 * kMs - cost;
  c.ranks = std::move(ranks);
  return c;
}

Report job() {
  Report r;
  for (int rank : {0, 1}) {
    ProcessReport p;
    p.rank = rank;
    SyncSite item;
    item.file = "/src/train.py";
    item.line = 73;
    item.function = "main";
    item.classification.operation = "Tensor.item()";
    item.classification.key = "item";
    item.calls = 40;
    p.sync_sites.hidden.push_back(item);
    r.processes.push_back(p);
  }
  r.diagnosis.step_ns = 50 * kMs;
  r.diagnosis.causes = {cause(CauseKind::InputPipeline, "rank 1's input pipeline", 30 * kMs, {0, 1}),
                        cause(CauseKind::HiddenSync, "Tensor.item() at /src/train.py:73 in main", 8 * kMs, {0, 1}),
                        cause(CauseKind::PageableInput, "blocking uploads", 2 * kMs, {0}),
                        cause(CauseKind::Finding, "FP32 GEMMs", 0, {0})};
  r.diagnosis.causes[1].site = "/src/train.py:73 in main";
  r.diagnosis.causes[1].operation = "Tensor.item()";
  r.diagnosis.causes.back().finding = FindingKind::Fp32Gemm;
  r.diagnosis.causes.back().predicted_step_ns = 0;  // advice: not measured
  return r;
}

std::vector<std::string> cause_violations(const AuditResult& result) {
  std::vector<std::string> out;
  for (const RuleResult& rule : result.rules)
    if (rule.rule == "cause_share")
      for (const Violation& v : rule.violations) out.push_back(v.message);
  return out;
}

TEST(AuditCauses, EachCostlyCauseFailsOnTheRanksItLengthens) {
  const AuditResult result = audit(job(), Policy{}, nullptr);
  ASSERT_EQ(result.rules.front().rule, "cause_share");
  EXPECT_EQ(result.rules.front().description, "no root cause costs over 10.0 % of the job's step");
  EXPECT_EQ(
      cause_violations(result),
      (std::vector<std::string>{
          "rank 0's step: rank 1's input pipeline: 30.0 ms per step, 60.0 % of the 50.0 ms step, limit 10.0 %; "
          "fixed, the step would be about 20.0 ms",
          "rank 1's step: rank 1's input pipeline: 30.0 ms per step, 60.0 % of the 50.0 ms step, limit 10.0 %; "
          "fixed, the step would be about 20.0 ms",
          "rank 0's step: Tensor.item() at /src/train.py:73 in main: 8.0 ms per step, 16.0 % of the 50.0 ms step, "
          "limit 10.0 %; fixed, the step would be about 42.0 ms",
          "rank 1's step: Tensor.item() at /src/train.py:73 in main: 8.0 ms per step, 16.0 % of the 50.0 ms step, "
          "limit 10.0 %; fixed, the step would be about 42.0 ms"}));
  EXPECT_EQ(result.rules.front().violations[1].rank, 1);
  EXPECT_FALSE(result.passed());
}

TEST(AuditCauses, AnAllowedSyncAndAHigherLimitPass) {
  Policy policy;
  policy.allow.push_back({"train.py:73", "logged on purpose"});
  EXPECT_EQ(cause_violations(audit(job(), policy, nullptr)).size(), 2u);  // the input pipeline's
  policy.cause_share = 0.70;
  EXPECT_TRUE(cause_violations(audit(job(), policy, nullptr)).empty());
}

std::vector<std::string> violations_of(const AuditResult& result, const std::string& rule_name) {
  std::vector<std::string> out;
  for (const RuleResult& rule : result.rules)
    if (rule.rule == rule_name)
      for (const Violation& v : rule.violations) out.push_back(v.message);
  return out;
}

// Rank 0's item() blocks 80 % of its run, nearly all of it while its all-reduce waits for rank 1:
// its step is 70 % waiting for rank 1 and 6 % the item()'s bubble. blocked_share and wait_share
// take those parts of its step breakdown, so the wait fails once (wait_share), not also as time
// blocked; rank 1's bubbles of 12 % (a cpu()'s and its item()'s) fail blocked_share. A rank without steps is judged on
// its blocked time and collective wait of the run.
TEST(AuditStepShares, BlockedAndWaitSharesAreDisjointPartsOfTheStep) {
  Report r = job();
  auto breakdown = [](std::vector<StepShare> parts) {
    StepBreakdown b;
    b.measured = true;
    b.steps = 40;
    b.step_ns = 50 * kMs;
    b.parts = std::move(parts);
    return b;
  };
  r.processes[0].sync_sites.span_ns = 40 * 50 * kMs;
  r.processes[0].sync_sites.hidden[0].blocked_ns = 40 * 40 * kMs;
  r.processes[0].step_breakdown = breakdown({{StepPart::WaitingForStraggler, "", 1, 35 * kMs, 0.70},
                                             {StepPart::Compute, "", -1, 12 * kMs, 0.24},
                                             {StepPart::Sync, "/src/train.py:73 in main", -1, 3 * kMs, 0.06}});
  r.processes[1].sync_sites.span_ns = 40 * 50 * kMs;
  r.processes[1].sync_sites.hidden[0].blocked_ns = 40 * 6 * kMs;
  SyncSite cpu = r.processes[1].sync_sites.hidden[0];
  cpu.line = 90;
  cpu.classification.operation = "Tensor.cpu()";
  cpu.blocked_ns = 40 * kMs;
  r.processes[1].sync_sites.hidden.push_back(cpu);
  r.processes[1].step_breakdown = breakdown({{StepPart::Input, "", -1, 30 * kMs, 0.60},
                                             {StepPart::Compute, "", -1, 14 * kMs, 0.28},
                                             {StepPart::Sync, "/src/train.py:90 in main", -1, 4 * kMs, 0.08},
                                             {StepPart::Sync, "/src/train.py:73 in main", -1, 2 * kMs, 0.04}});
  const AuditResult result = audit(r, Policy{}, nullptr);
  // The largest is the largest bubble (the cpu()'s), not the longest blocked (the item()'s).
  EXPECT_EQ(violations_of(result, "blocked_share"),
            (std::vector<std::string>{"rank 1: the GPU idle after hidden syncs 12.0 % of the step, limit 10.0 % "
                                      "(largest: Tensor.cpu() at /src/train.py:90 in main)"}));
  EXPECT_EQ(violations_of(result, "wait_share"),
            (std::vector<std::string>{"rank 0: waiting for other ranks 70.0 % of the step, limit 25.0 %"}));

  Policy allowing;
  allowing.allow.push_back({"train.py:90", "logged on purpose"});
  EXPECT_TRUE(violations_of(audit(r, allowing, nullptr), "blocked_share").empty()) << "4 % left";

  r.processes[0].step_breakdown.reset();
  EXPECT_EQ(violations_of(audit(r, Policy{}, nullptr), "blocked_share").front(),
            "rank 0: blocked in hidden syncs 80.0 % of the run, limit 10.0 % "
            "(largest: Tensor.item() at /src/train.py:73 in main)");
}

// Against a baseline, cause_share is checked only where the policy file sets it.
TEST(AuditCauses, WithABaselineOnlyWhenThePolicySetsIt) {
  const nlohmann::json baseline = {
      {"format", kBaselineFormat}, {"sites", nlohmann::json::array()}, {"ranks", nlohmann::json::array()}};
  Policy policy;
  const auto rules = [&] {
    std::vector<std::string> names;
    for (const RuleResult& rule : audit(job(), policy, &baseline).rules) names.push_back(rule.rule);
    return names;
  };
  const std::vector<std::string> unset = rules();
  EXPECT_EQ(std::count(unset.begin(), unset.end(), "cause_share"), 0);
  policy.limits_set.insert("cause_share");
  const std::vector<std::string> set = rules();
  EXPECT_EQ(std::count(set.begin(), set.end(), "cause_share"), 1);
}

std::vector<std::string> new_sync_sites(const Report& report, const nlohmann::json& baseline) {
  std::vector<std::string> out;
  for (const RuleResult& rule : audit(report, Policy{}, &baseline).rules)
    if (rule.rule == "new_sync_sites")
      for (const Violation& v : rule.violations) out.push_back(v.message);
  return out;
}

void reword_item(Report& report) {
  for (ProcessReport& p : report.processes) p.sync_sites.hidden.front().classification.operation = "Tensor.item() read";
}

TEST(AuditBaseline, ARewordedOperationIsNoNewSite) {
  Report report = job();
  const nlohmann::json baseline = baseline_of(report);
  EXPECT_EQ(baseline.at("format"), "trainshim-baseline/2");
  EXPECT_EQ(baseline.at("sites").at(0).at("identity"), "item\x1f/src/train.py\x1fmain\x1f");
  EXPECT_TRUE(new_sync_sites(report, baseline).empty());
  reword_item(report);
  EXPECT_TRUE(new_sync_sites(report, baseline).empty());
  for (ProcessReport& p : report.processes) p.sync_sites.hidden.front().classification.key = "cpu";
  EXPECT_EQ(new_sync_sites(report, baseline),
            std::vector<std::string>{"new hidden sync Tensor.item() read at /src/train.py:73 in main: 40.00 in the run "
                                     "(no steps found)"});
}

// A file written before the keys holds the operation's words: the same words match, new ones not.
TEST(AuditBaseline, AFileOfFormatOneIsMatchedOnTheWords) {
  Report report = job();
  nlohmann::json baseline = baseline_of(report);
  baseline["format"] = "trainshim-baseline/1";
  baseline["sites"][0]["identity"] = "Tensor.item()\x1f/src/train.py\x1fmain\x1f";
  ASSERT_TRUE(is_baseline(baseline));
  EXPECT_TRUE(new_sync_sites(report, baseline).empty());
  reword_item(report);
  EXPECT_EQ(new_sync_sites(report, baseline).size(), 1u);
}

}  // namespace
}  // namespace trainshim::cli
