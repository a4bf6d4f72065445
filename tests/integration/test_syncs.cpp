// The hidden-sync audit end to end: planted synchronisations at known lines must come out named
// by exactly those lines, functions and counts, and nothing else.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "harness.hpp"

namespace trainshim::test {
namespace {

using nlohmann::json;

std::string line_text(const std::string& source, int wanted) {
  std::ifstream in(source);
  std::string text;
  for (int line = 1; std::getline(in, text); ++line)
    if (line == wanted) {
      const auto first = text.find_first_not_of(" \t");
      return text.substr(first);
    }
  return {};
}

// The site of `sites` at file (by suffix) and line; fails the test when missing.
json site_at(const json& sites, const std::string& file, int line) {
  for (const auto& s : sites)
    if (s.at("file").get<std::string>().ends_with(file) && s.at("line") == line) return s;
  ADD_FAILURE() << "no site at " << file << ":" << line << " in " << sites.dump(1);
  return json::object();
}

class PlantedPythonSyncs : public ::testing::TestWithParam<std::string> {};

// The Python frames from the planted file outwards (the frames above them are torch's own).
json user_frames(const json& stack, const std::string& file) {
  json out = json::array();
  bool inside = false;
  for (const auto& frame : stack) {
    inside = inside || frame.at("file").get<std::string>().ends_with(file);
    if (inside) out.push_back(frame);
  }
  return out;
}

TEST_P(PlantedPythonSyncs, ReportNamesExactlyThePlantedLines) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/planted_syncs.py";
  const auto result = run("PYTHONPATH=" + std::string(Paths::torchlike_site) + " " + trainshim_cli() +
                          " run --json --out " + s.db() + " -- " + GetParam() + " " + script);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json report = json::parse(result.out);
  ASSERT_EQ(report.at("ranks").size(), 1u) << "forked workers that make no CUDA call must leave no trace";
  const json& rank = report.at("ranks")[0];

  EXPECT_EQ(rank.at("steps").at("count"), 12) << rank.at("steps").dump();
  const json& hidden = rank.at("hidden_syncs");
  const json& explicit_syncs = rank.at("explicit_syncs");
  // torch's cudaFree(nullptr) at the first CUDA tensor creates the context: never a sync.
  EXPECT_EQ(hidden.size(), 4u) << hidden.dump(1);
  ASSERT_EQ(explicit_syncs.size(), 1u) << explicit_syncs.dump(1);

  struct Expected {
    const char* marker;
    const char* operation;
    const char* function;
    int calls;
    std::vector<std::string> callers;  // the next Python frames out, innermost first
  };
  const std::vector<Expected> planted_hidden = {
      {"# PLANTED item", "Tensor.item()", "loss_value", 12, {"train_step", "main"}},
      {"# PLANTED cpu", "Tensor.cpu() / .to('cpu')", "accuracy", 6, {"metrics", "train_step", "main"}},
      {"# PLANTED nonzero", "nonzero() / boolean-mask indexing", "train_step", 12, {"main"}},
      {"# PLANTED thread_item", "Tensor.item()", "background_eval", 5, {"run"}},
  };
  for (const auto& p : planted_hidden) {
    SCOPED_TRACE(p.marker);
    const int line = marked_line(script, p.marker);
    const json site = site_at(hidden, "planted_syncs.py", line);
    if (site.empty()) continue;
    EXPECT_EQ(site.at("operation"), p.operation);
    EXPECT_EQ(site.at("function"), p.function);
    EXPECT_EQ(site.at("calls"), p.calls);
    EXPECT_DOUBLE_EQ(site.at("per_step").get<double>(), p.calls / 12.0);
    EXPECT_EQ(site.at("source"), line_text(script, line));
    EXPECT_GT(site.at("blocked_ns").get<int64_t>(), 0);
    const json stack = user_frames(site.at("python_stack"), "planted_syncs.py");
    ASSERT_GT(stack.size(), p.callers.size()) << site.at("python_stack").dump(1);
    EXPECT_EQ(stack[0].at("line"), line);
    for (std::size_t i = 0; i < p.callers.size(); ++i) EXPECT_EQ(stack[i + 1].at("function"), p.callers[i]) << i;
  }
  const json sync = site_at(explicit_syncs, "planted_syncs.py", marked_line(script, "# PLANTED synchronize"));
  EXPECT_EQ(sync.at("operation"), "torch.cuda.synchronize()");
  EXPECT_EQ(sync.at("function"), "train_step");
  EXPECT_EQ(sync.at("calls"), 12);
  EXPECT_NE(sync.at("native_frame").get<std::string>().find("THCPModule_cudaSynchronize"), std::string::npos)
      << sync.at("native_frame");

  // Named by torch's own frames: the binding outside the op entry at::_ops::item::call.
  const json item = site_at(hidden, "planted_syncs.py", marked_line(script, "# PLANTED item"));
  EXPECT_EQ(item.at("rule"), "item");
  EXPECT_NE(item.at("native_frame").get<std::string>().find("THPVariable_item"), std::string::npos)
      << item.at("native_frame");
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PlantedPythonSyncs,
                         ::testing::ValuesIn(std::vector<std::string>{TRAINSHIM_TEST_PYTHONS}), [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// A polling loop is reported as polls with a count, never as syncs; cudaFree(NULL) is nothing.
TEST(Polls, AreCountedApartFromSyncsWithSampledStacks) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/polls.py";
  const auto result = run(trainshim_cli() + " run --json --out " + s.db() + " -- python3 " + script);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json rank = json::parse(result.out).at("ranks")[0];
  ASSERT_EQ(rank.at("polls").size(), 1u) << rank.at("polls").dump(1);
  const json poll = site_at(rank.at("polls"), "polls.py", marked_line(script, "# PLANT poll"));
  EXPECT_EQ(poll.at("operation"), "cudaStreamQuery()");
  EXPECT_EQ(poll.at("calls"), 1000);
  EXPECT_EQ(poll.at("function"), "wait_for");
  EXPECT_TRUE(rank.at("hidden_syncs").empty()) << rank.at("hidden_syncs").dump(1);
  ASSERT_EQ(rank.at("explicit_syncs").size(), 1u) << rank.at("explicit_syncs").dump(1);
  EXPECT_EQ(rank.at("explicit_syncs")[0].at("line"), marked_line(script, "# PLANT sync"));
  // One poll in 256 carries its stacks: polls 1, 257, 513 and 769 (all in the recent window); the
  // others are counted under theirs.
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM recent_events e JOIN apis a ON a.id = e.api "
                              "WHERE a.name = 'cudaStreamQuery' AND e.python_stack != 0"),
            4);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api "
                              "WHERE a.name = 'cudaFree' AND e.python_stack = 0 AND e.object = 0"),
            1);
}

// "3.12" for ".../bin/python3.12".
std::string python_version_of(const std::string& interpreter) {
  return interpreter.substr(interpreter.rfind("python") + 6);
}

// The autograd engine's device thread (a Python thread state, no frames: PythonEngine::thread_init)
// syncs while the main thread waits in loss.backward(): the site is the line that called backward,
// marked in backward; the same thread's syncs while the main thread is elsewhere borrow nothing;
// and a sync 100 framework frames below the user's call is still named by the user's line.
class AutogradThreadSyncs : public ::testing::TestWithParam<std::string> {};

TEST_P(AutogradThreadSyncs, AreNamedByTheLineThatCalledBackward) {
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/backward_sync.py";
  const std::string site_packages = std::string(Paths::programs) + "/backward_fixture/site-packages";
  const auto result = run(trainshim_cli() + " run --json --out " + s.db() + " -- " + GetParam() + " " + script + " " +
                          Paths::programs + "/libautograd_engine.so " + site_packages);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json report = json::parse(result.out);
  ASSERT_EQ(report.at("ranks").size(), 1u);
  const json& rank = report.at("ranks")[0];
  EXPECT_EQ(rank.at("python_version"), python_version_of(GetParam()));
  EXPECT_TRUE(rank.at("python_stacks_unavailable").is_null()) << rank.at("python_stacks_unavailable");
  const json& hidden = rank.at("hidden_syncs");

  const int backward_line = marked_line(script, "# PLANTED backward");
  const json backward = site_at(hidden, "backward_sync.py", backward_line);
  ASSERT_FALSE(backward.empty());
  EXPECT_EQ(backward.at("function"), "train_step");
  EXPECT_EQ(backward.at("calls"), 6);  // 3 steps, 2 syncs in each backward
  EXPECT_EQ(backward.at("in_backward"), true);
  EXPECT_EQ(backward.at("source"), line_text(script, backward_line));
  const json& stack = backward.at("python_stack");
  ASSERT_EQ(stack.size(), 6u) << stack.dump(1);
  const std::vector<std::pair<std::string, std::string>> frames = {
      {"/site-packages/torch/autograd/graph.py", "_engine_run_backward"},
      {"/site-packages/torch/autograd/__init__.py", "backward"},
      {"/site-packages/torch/_tensor.py", "backward"},
      {"/backward_sync.py", "train_step"},
      {"/backward_sync.py", "main"},
      {"/backward_sync.py", "<module>"}};
  for (std::size_t i = 0; i < frames.size(); ++i) {
    EXPECT_TRUE(stack[i].at("file").get<std::string>().ends_with(frames[i].first)) << i << " " << stack[i];
    EXPECT_EQ(stack[i].at("function"), frames[i].second) << i;
  }
  EXPECT_EQ(stack[3].at("line"), backward_line);

  // Only the backward syncs borrowed a stack: the device thread's work for evaluate() has none.
  int in_backward = 0;
  int without_python = 0;
  for (const auto& site : hidden) {
    in_backward += site.at("in_backward").get<bool>() ? 1 : 0;
    if (site.at("python_stack").empty()) {
      ++without_python;
      EXPECT_EQ(site.at("in_backward"), false);
    }
    if (site.at("file").get<std::string>().ends_with("backward_sync.py")) {
      EXPECT_NE(site.at("line"), marked_line(script, "# PLANTED not_in_backward")) << site;
    }
  }
  EXPECT_EQ(in_backward, 1) << hidden.dump(1);
  EXPECT_GE(without_python, 1) << hidden.dump(1);
  EXPECT_EQ(query_int(s.db(), "SELECT count(*) FROM events e JOIN apis a ON a.id = e.api JOIN python_stacks p ON "
                              "p.process_id = e.process_id AND p.stack_id = e.python_stack WHERE p.borrowed = 1 AND "
                              "a.name = 'cudaStreamSynchronize'"),
            6);

  // 103 frames (<module>, main, 101 of fit): the innermost 42 and the outermost 20 are kept.
  const int deep_line = marked_line(script, "# PLANTED deep");
  const json deep = site_at(hidden, "backward_sync.py", deep_line);
  ASSERT_FALSE(deep.empty());
  EXPECT_EQ(deep.at("function"), "main");
  EXPECT_EQ(deep.at("calls"), 1);
  EXPECT_EQ(deep.at("in_backward"), false);
  const json& deep_stack = deep.at("python_stack");
  ASSERT_EQ(deep_stack.size(), 62u);
  EXPECT_EQ(deep_stack[0].at("function"), "fit");
  EXPECT_EQ(deep_stack[60].at("function"), "main");
  EXPECT_EQ(deep_stack[60].at("line"), deep_line);
  EXPECT_EQ(deep_stack[61].at("function"), "<module>");
  EXPECT_EQ(query_int(s.db(), "SELECT max(omitted) FROM python_stacks"), 41);

  const auto text = run(trainshim_cli() + " report " + s.db());
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_NE(text.out.find("at " + script + ":" + std::to_string(backward_line) +
                          " in train_step (in backward, autograd thread)\n"),
            std::string::npos)
      << text.out;
  EXPECT_EQ(text.out.find("Python stacks unavailable"), std::string::npos) << text.out;
}

INSTANTIATE_TEST_SUITE_P(Interpreters, AutogradThreadSyncs,
                         ::testing::ValuesIn(std::vector<std::string>{TRAINSHIM_TEST_PYTHONS}), [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return name;
                         });

// Under an interpreter whose stacks trainshim cannot read, the report says so once for the rank.
TEST(PythonStacksUnavailable, ReportSaysWhyOncePerRank) {
  const std::string python = TRAINSHIM_TEST_UNSUPPORTED_PYTHON;
  if (python.empty()) GTEST_SKIP() << "no CPython 3.9 on this machine";
  Scratch s;
  const std::string script = std::string(Paths::source) + "/tests/python/polls.py";
  const auto result = run(trainshim_cli() + " run --json --out " + s.db() + " -- " + python + " " + script);
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json report = json::parse(result.out);
  const json& rank = report.at("ranks")[0];
  EXPECT_EQ(rank.at("python_version"), "3.9");
  const std::string reason = "CPython 3.9: trainshim reads Python stacks of CPython 3.10 to 3.13 (release builds) only";
  EXPECT_EQ(rank.at("python_stacks_unavailable"), reason);
  ASSERT_EQ(rank.at("explicit_syncs").size(), 1u) << rank.at("explicit_syncs").dump(1);
  EXPECT_TRUE(rank.at("explicit_syncs")[0].at("python_stack").empty()) << rank.at("explicit_syncs")[0];

  const auto text = run(trainshim_cli() + " report " + s.db());
  ASSERT_EQ(text.exit_code, 0) << text.out;
  const std::string line = "  Python stacks unavailable: " + reason + "; sites are named by native frames\n";
  const auto first = text.out.find(line);
  EXPECT_NE(first, std::string::npos) << text.out;
  EXPECT_EQ(text.out.find(line, first + 1), std::string::npos) << text.out;
}

TEST(NativeSyncs, FramesComeOutDemangledAtTheirLines) {
  Scratch s;
  const std::string source = std::string(Paths::source) + "/tests/programs/native_syncs.cpp";
  const auto result =
      run(trainshim_cli() + " run --json --out " + s.db() + " -- " + Paths::programs + "/native_syncs_prog");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  const json report = json::parse(result.out.substr(result.out.find('{')));
  const json& rank = report.at("ranks")[0];
  ASSERT_EQ(rank.at("explicit_syncs").size(), 1u) << rank.at("explicit_syncs").dump(1);
  const json drain = rank.at("explicit_syncs")[0];
  EXPECT_EQ(drain.at("operation"), "cudaStreamSynchronize()");
  EXPECT_EQ(drain.at("function"), "planted::drain_queue()");
  EXPECT_TRUE(drain.at("file").get<std::string>().ends_with("native_syncs.cpp")) << drain.at("file");
  EXPECT_EQ(drain.at("line"), marked_line(source, "NATIVE_EXPLICIT_LINE"));
  EXPECT_EQ(drain.at("calls"), 8);

  // The only hidden sync is the item(); torch's cudaFree(nullptr) (context creation) is none.
  EXPECT_EQ(rank.at("hidden_syncs").size(), 1u) << rank.at("hidden_syncs").dump(1);
  const json item = find_row(rank.at("hidden_syncs"), {{"operation", "Tensor.item()"}});
  ASSERT_FALSE(item.is_null()) << rank.at("hidden_syncs").dump(1);
  EXPECT_EQ(item.at("function"), "planted::read_loss(at::Tensor const&, int)");
  EXPECT_EQ(item.at("line"), marked_line(source, "NATIVE_ITEM_LINE"));
  EXPECT_EQ(item.at("calls"), 8);
  std::vector<std::string> functions;
  for (const auto& f : item.at("native_stack")) functions.push_back(f.at("function"));
  ASSERT_GE(functions.size(), 8u);
  EXPECT_EQ(functions[0], "at::native::_local_scalar_dense_cuda(at::Tensor const&)");
  EXPECT_EQ(functions[1],
            "at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA___local_scalar_dense(at::Tensor const&)");
  EXPECT_EQ(functions[2], "at::_ops::_local_scalar_dense::call(at::Tensor const&)");
  EXPECT_EQ(functions[3], "at::native::item(at::Tensor const&)");
  EXPECT_EQ(functions[4], "at::_ops::item::call(at::Tensor const&)");
  EXPECT_EQ(functions[5], "planted::read_loss(at::Tensor const&, int)");
  EXPECT_EQ(functions[6], "planted::log_metrics(at::Tensor const&, int)");
  EXPECT_EQ(functions[7], "main");
}

}  // namespace
}  // namespace trainshim::test
