// What the report says of Python stacks: a site whose stack an autograd engine thread borrowed
// from the thread blocked in backward, and a rank whose interpreter's stacks cannot be read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "database.hpp"
#include "diagnose/load_report.hpp"
#include "render/report_json.hpp"
#include "render/report_text.hpp"
#include "run_fixtures.hpp"
#include "store/run_database.hpp"
#include "temp_dir.hpp"

namespace trainshim::cli {
namespace {

using collector::Database;

void sync_with_python_stack(test::Records& records, int64_t process, uint32_t python_stack, uint64_t begin) {
  EventRecord r{};
  r.api = static_cast<uint16_t>(Api::cudaStreamSynchronize);
  r.python_stack = python_stack;
  records.add(process, r, begin, begin + 1000);
}

class PythonReportTest : public test::TempDirTest {
 protected:
  void SetUp() override {
    Database db(path_, "unitjob");
    const int64_t rank0 = db.add_process("seg-100", *test::header_for(0, 100, "nodeA"));
    const int64_t rank1 = db.add_process("seg-101", *test::header_for(1, 101, "nodeA"));
    // Stack 7 was borrowed: the main thread's, blocked in backward; stack 8 is a thread's own.
    db.add_python_frame(rank0, 7, 0, "/venv/lib/python3.11/site-packages/torch/autograd/graph.py",
                        "_engine_run_backward", 768, "return Variable._execution_engine.run_backward(");
    db.add_python_frame(rank0, 7, 1, "/home/u/train.py", "train_step", 25, "loss.backward()");
    db.add_python_stack(rank0, 7, true, 0);
    db.add_python_frame(rank0, 8, 0, "/home/u/train.py", "evaluate", 40, "acc = correct.item()");
    db.add_python_stack(rank0, 8, false, 0);
    test::Records records(db);
    for (uint64_t i = 0; i < 3; ++i) sync_with_python_stack(records, rank0, 7, 10'000 + i * 10'000);
    sync_with_python_stack(records, rank0, 8, 50'000);
    records.store();
    db.update_process(rank0,
                      {.events = 4, .python_stacks = python_stacks_word(PythonStacks::Available, 11), .ended = true});
    db.update_process(rank1, {.python_stacks = python_stacks_word(PythonStacks::FreeThreaded, 13), .ended = true});
    db.commit();
  }
  const std::string path_ = dir_ + "/run.db";
};

const nlohmann::ordered_json* site_at_line(const nlohmann::ordered_json& rank, int line) {
  for (const char* list : {"hidden_syncs", "explicit_syncs"})
    for (const auto& site : rank.at(list))
      if (site.at("line") == line) return &site;
  return nullptr;
}

TEST_F(PythonReportTest, BorrowedStackMarksTheSiteInBackward) {
  RunDatabase db(path_);
  const Report report = load_report(db);
  const auto json = render_json(report);
  const auto& rank0 = json.at("ranks")[0];
  const auto* backward = site_at_line(rank0, 25);
  const auto* evaluate = site_at_line(rank0, 40);
  ASSERT_TRUE(backward && evaluate) << rank0.dump(1);
  EXPECT_EQ(backward->at("function"), "train_step");
  EXPECT_EQ(backward->at("calls"), 3);
  EXPECT_EQ(backward->at("in_backward"), true);
  EXPECT_EQ(evaluate->at("calls"), 1);
  EXPECT_EQ(evaluate->at("in_backward"), false);

  const std::string text = render_text(report);
  EXPECT_NE(text.find("      at /home/u/train.py:25 in train_step (in backward, autograd thread)\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("      at /home/u/train.py:40 in evaluate\n"), std::string::npos) << text;
}

TEST_F(PythonReportTest, UnreadableStacksAreSaidOncePerRank) {
  RunDatabase db(path_);
  const Report report = load_report(db);
  const auto json = render_json(report);
  const auto& rank0 = json.at("ranks")[0];
  const auto& rank1 = json.at("ranks")[1];
  EXPECT_EQ(rank0.at("python_version"), "3.11");
  EXPECT_TRUE(rank0.at("python_stacks_unavailable").is_null());
  EXPECT_EQ(rank1.at("python_version"), "3.13t");
  const std::string reason =
      "free-threaded CPython 3.13t: trainshim reads Python stacks of the GIL builds of CPython 3.10 to 3.13 only";
  EXPECT_EQ(rank1.at("python_stacks_unavailable"), reason);

  const std::string text = render_text(report);
  const std::string line = "  Python stacks unavailable: " + reason + "; sites are named by native frames\n";
  const auto first = text.find(line);
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(line, first + 1), std::string::npos) << text;
  EXPECT_GT(first, text.find("rank 1  pid 101")) << text;
}

}  // namespace
}  // namespace trainshim::cli
