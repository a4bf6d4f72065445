// In a process without Python every entry point answers "nothing", cheaply and repeatedly.
#include <gtest/gtest.h>

#include <thread>

#include "core/python_stack.hpp"

namespace py = trainshim::shim::python;

TEST(PythonStack, NoFramesWithoutPython) {
  py::RawFrame frames[8];
  EXPECT_EQ(py::capture(frames, 8).count, 0);
  EXPECT_EQ(py::capture(frames, 8).count, 0);  // the cached answer
  EXPECT_TRUE(py::interpreter_version().empty());
  EXPECT_TRUE(py::detail::layout_report().empty());
  EXPECT_EQ(py::stacks_status(), trainshim::python_stacks_word(trainshim::PythonStacks::NoPython, 0));
}

TEST(PythonStack, NoFramesOnOtherThreads) {
  int counts[4] = {-1, -1, -1, -1};
  std::thread threads[4];
  for (int i = 0; i < 4; ++i) {
    threads[i] = std::thread([&counts, i] {
      py::RawFrame frames[8];
      counts[i] = py::capture(frames, 8).count;
    });
  }
  for (auto& thread : threads) thread.join();
  for (int count : counts) EXPECT_EQ(count, 0);
}

TEST(PythonStack, CodeObjectsAreNotDescribedWithoutPython) {
  const long not_code[8] = {};
  py::CodeInfo info;
  EXPECT_FALSE(py::describe_code(not_code, false, info));
  EXPECT_FALSE(py::describe_code(not_code, true, info));
  EXPECT_FALSE(py::describe_code(nullptr, false, info));
  EXPECT_EQ(py::line_of(not_code, 0, false), 0);
  EXPECT_EQ(py::line_of(not_code, 0, true), 0);
}
