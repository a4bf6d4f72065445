// Step detection: a step named by the user (file:line or function), the repeating collective
// sequence, the most frequent sync site, and nothing found.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "analyse/steps.hpp"

namespace trainshim::cli {
namespace {

// Adds `times` calls of one sync site with its Python functions (innermost first).
void add_sync(StepInput& in, const std::string& site, const std::vector<std::string>& functions, int times = 1) {
  for (int i = 0; i < times; ++i) {
    in.syncs.push_back(in.intern(site, functions));
  }
}

// --- A step named by the user ----------------------------------------------------------------------

// A loop that syncs at train.py:57 (in train_step) and at data.py:12 (in load_batch, called from
// train_step) on each of 10 steps, after two syncs in set-up.
// A collective as the step detection sees it, written "op/bytes": the same text, the same call.
CollectiveCall call(const std::string& op_bytes) {
  static std::map<std::string, int64_t> apis;
  const auto slash = op_bytes.find('/');
  const auto [api, fresh] = apis.try_emplace(op_bytes.substr(0, slash), int64_t(apis.size()));
  return {api->second, std::stoll(op_bytes.substr(slash + 1))};
}

std::vector<CollectiveCall> calls(std::initializer_list<const char*> op_bytes) {
  std::vector<CollectiveCall> out;
  for (const char* c : op_bytes) out.push_back(call(c));
  return out;
}

StepInput named_input() {
  StepInput in;
  add_sync(in, "/abs/path/setup.py:3", {"init", "<module>"}, 2);
  for (int i = 0; i < 10; ++i) {
    add_sync(in, "/abs/path/data.py:12", {"load_batch", "train_step", "<module>"});
    add_sync(in, "/abs/path/train.py:57", {"train_step", "<module>"});
  }
  in.collectives = calls({"all_reduce/100", "all_reduce/100", "all_reduce/100", "all_reduce/100"});
  in.span_ns = 5'000'000'003;
  return in;
}

TEST(StepsNamed, ByFileAndLineMatchesTheEndOfTheSite) {
  const Steps s = find_steps(named_input(), "train.py:57");
  EXPECT_EQ(s.count, 10);
  EXPECT_EQ(s.step_ns, 500'000'000);
  EXPECT_EQ(s.rule, "the step named train.py:57: one step per sync at /abs/path/train.py:57");
}

TEST(StepsNamed, ByFullPathAndLine) {
  const Steps s = find_steps(named_input(), "/abs/path/setup.py:3");
  EXPECT_EQ(s.count, 2);
  EXPECT_EQ(s.step_ns, 2'500'000'001);
  EXPECT_EQ(s.rule, "the step named /abs/path/setup.py:3: one step per sync at /abs/path/setup.py:3");
}

TEST(StepsNamed, ByFunctionTakesTheFirstSiteInsideIt) {
  // data.py:12 is reached inside train_step before train.py:57.
  const Steps s = find_steps(named_input(), "train_step");
  EXPECT_EQ(s.count, 10);
  EXPECT_EQ(s.step_ns, 500'000'000);
  EXPECT_EQ(s.rule, "the step named train_step: one step per sync at /abs/path/data.py:12");
}

TEST(StepsNamed, ByFunctionMatchesWholeNamesOnly) {
  EXPECT_EQ(find_steps(named_input(), "train").count, 0);
  EXPECT_EQ(find_steps(named_input(), "load_batch").rule,
            "the step named load_batch: one step per sync at /abs/path/data.py:12");
}

TEST(StepsNamed, NoMatch) {
  const Steps s = find_steps(named_input(), "train.py:58");
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.step_ns, 0);
  EXPECT_EQ(s.rule, "the step named train.py:58 matched no synchronisation");

  const Steps f = find_steps(named_input(), "validate");
  EXPECT_EQ(f.count, 0);
  EXPECT_EQ(f.step_ns, 0);
  EXPECT_EQ(f.rule, "the step named validate matched no synchronisation");
}

TEST(StepsNamed, NamedStepWinsOverTheCollectivePeriod) {
  // The collectives repeat every 1 (4 steps); the named site gives 10.
  EXPECT_EQ(find_steps(named_input(), "train.py:57").count, 10);
  EXPECT_EQ(find_steps(named_input(), "").count, 4);
}

// "train.py:57" names train.py, not another file whose name merely ends the same way: the suffix
// should start at a path component.
TEST(StepsNamed, FileAndLineDoesNotMatchAnotherFileWithTheSameEnding) {
  StepInput in;
  add_sync(in, "/abs/path/pretrain.py:57", {"warmup", "<module>"}, 3);
  add_sync(in, "/abs/path/train.py:57", {"train_step", "<module>"}, 10);
  in.span_ns = 1'000;
  const Steps s = find_steps(in, "train.py:57");
  EXPECT_EQ(s.count, 10);
  EXPECT_EQ(s.rule, "the step named train.py:57: one step per sync at /abs/path/train.py:57");
}

// --- The repeating collective sequence -------------------------------------------------------------

TEST(StepsCollectives, PeriodAfterASetUp) {
  StepInput in;
  in.collectives.push_back(call("broadcast/4"));
  for (int i = 0; i < 10; ++i) {
    in.collectives.push_back(call("all_reduce/100"));
    in.collectives.push_back(call("all_reduce/200"));
  }
  add_sync(in, "/abs/path/train.py:57", {"train_step"}, 7);  // ignored: the collectives decide
  in.span_ns = 1'000'000'007;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 10);
  EXPECT_EQ(s.step_ns, 100'000'000);
  EXPECT_EQ(s.rule, "the collective sequence repeats every 2 collectives");
}

TEST(StepsCollectives, PeriodOfOne) {
  StepInput in;
  in.collectives.assign(6, call("all_reduce/4096"));
  in.span_ns = 600;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 6);
  EXPECT_EQ(s.step_ns, 100);
  EXPECT_EQ(s.rule, "the collective sequence repeats every 1 collective");
}

TEST(StepsCollectives, SmallestPeriodAndAnUnfinishedLastStep) {
  // (a, a, b) x 5, then the first collective of a sixth step.
  StepInput in;
  for (int i = 0; i < 5; ++i)
    in.collectives.insert(in.collectives.end(), {call("all_gather/8"), call("all_gather/8"), call("reduce_scatter/8")});
  in.collectives.push_back(call("all_gather/8"));
  in.span_ns = 50;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.step_ns, 10);
  EXPECT_EQ(s.rule, "the collective sequence repeats every 3 collectives");
}

TEST(StepsCollectives, ExactlyThreeRepetitionsAreEnough) {
  StepInput in;
  in.collectives = calls({"a/1", "b/2", "a/1", "b/2", "a/1", "b/2"});
  in.span_ns = 9;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.step_ns, 3);
  EXPECT_EQ(s.rule, "the collective sequence repeats every 2 collectives");
}

TEST(StepsCollectives, SetUpLongerThanAQuarterGivesNoPeriod) {
  // 4 set-up collectives before 3 repetitions of 2: 4 * 4 > 10.
  StepInput in;
  in.collectives = calls({"broadcast/1", "broadcast/2", "broadcast/3", "broadcast/4",  // set-up
                          "a/1", "b/2", "a/1", "b/2", "a/1", "b/2"});
  in.span_ns = 100;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.rule, "no repeating structure found: rates are per second");
}

// --- The most frequent sync site -------------------------------------------------------------------

TEST(StepsSites, FewerThanThreeRepetitionsFallsBackToTheMostFrequentSite) {
  StepInput in;
  in.collectives = calls({"all_reduce/100", "all_reduce/200", "all_reduce/100", "all_reduce/200"});
  add_sync(in, "/abs/path/eval.py:9", {"evaluate"}, 2);
  add_sync(in, "/abs/path/train.py:57", {"train_step"}, 4);
  add_sync(in, "/abs/path/eval.py:9", {"evaluate"}, 1);
  in.span_ns = 4'000'002;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 4);
  EXPECT_EQ(s.step_ns, 1'000'000);
  EXPECT_EQ(s.rule, "one step per call of the most frequent sync site, /abs/path/train.py:57");
}

TEST(StepsSites, TieBetweenSitesTakesTheFirstInNameOrder) {
  StepInput in;
  for (int i = 0; i < 3; ++i) {
    add_sync(in, "/abs/path/z_loss.py:4", {"loss"});
    add_sync(in, "/abs/path/a_metrics.py:8", {"metrics"});
  }
  in.span_ns = 30;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.step_ns, 10);
  EXPECT_EQ(s.rule, "one step per call of the most frequent sync site, /abs/path/a_metrics.py:8");
}

TEST(StepsSites, ThreeCallsAreEnough) {
  StepInput in;
  add_sync(in, "at::native::_local_scalar_dense(at::Tensor const&)", {}, 3);
  in.span_ns = 10;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 3);
  EXPECT_EQ(s.step_ns, 3);
  EXPECT_EQ(s.rule,
            "one step per call of the most frequent sync site, at::native::_local_scalar_dense(at::Tensor const&)");
}

// --- Nothing found -----------------------------------------------------------------------------------

TEST(StepsNone, NoRepetitionAndFewerThanThreeCalls) {
  StepInput in;
  in.collectives = calls({"broadcast/4", "all_reduce/100"});
  add_sync(in, "/abs/path/train.py:57", {"train_step"}, 2);
  add_sync(in, "/abs/path/eval.py:9", {"evaluate"}, 1);
  in.span_ns = 1'000;
  const Steps s = find_steps(in, "");
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.step_ns, 0);
  EXPECT_EQ(s.rule, "no repeating structure found: rates are per second");
  EXPECT_NE(s.rule.find("per second"), std::string::npos);
}

TEST(StepsNone, EmptyInput) {
  const Steps s = find_steps(StepInput{}, "");
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.step_ns, 0);
  EXPECT_EQ(s.rule, "no repeating structure found: rates are per second");
}

}  // namespace
}  // namespace trainshim::cli
