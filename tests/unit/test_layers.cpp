// viewer-cli's stages include only themselves and the stages below them (the link checks of
// viewer-cli/CMakeLists.txt catch calls upward; this catches the inline code of a header above),
// and the stages above the analyses read the database only through them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

namespace {

// The stages by rank: a file may include a stage of equal or lower rank. launch runs a job and
// needs only the run database; commands sit on top.
const std::map<std::string, int> kStageRank = {{"text", 0},     {"store", 1},  {"analyse", 2}, {"launch", 2},
                                               {"diagnose", 3}, {"render", 4}, {"commands", 5}};

// "render/report_text.hpp" included from a file of `stage`: a message when it reaches upward or
// sideways into launch; empty when allowed.
std::string include_violation(const std::string& stage, const std::string& included) {
  const auto slash = included.find('/');
  if (slash == std::string::npos) return "";
  const auto target = kStageRank.find(included.substr(0, slash));
  if (target == kStageRank.end() || target->first == stage) return "";
  const int from = kStageRank.at(stage);
  const bool sideways = from == target->second || (target->first == "launch" && stage != "commands");
  if (target->second < from && !sideways) return "";
  return stage + " includes " + included;
}

std::vector<std::string> violations_under(const std::filesystem::path& root) {
  std::vector<std::string> out;
  const std::regex include_line(R"re(^#include "([a-z_]+/[a-z_]+\.hpp)")re");
  for (const auto& [stage, rank] : kStageRank)
    for (const auto& entry : std::filesystem::directory_iterator(root / stage)) {
      std::ifstream in(entry.path());
      for (std::string line; std::getline(in, line);)
        if (std::smatch m; std::regex_search(line, m, include_line))
          if (std::string v = include_violation(stage, m[1]); !v.empty())
            out.push_back(entry.path().filename().string() + ": " + v);
    }
  return out;
}

TEST(Layers, AStageIncludesOnlyTheStagesBelowIt) {
  EXPECT_EQ(include_violation("render", "diagnose/report_model.hpp"), "");
  EXPECT_EQ(include_violation("analyse", "analyse/syncs.hpp"), "");
  EXPECT_EQ(include_violation("commands", "launch/run_job.hpp"), "");
  EXPECT_EQ(include_violation("analyse", "diagnose/present.hpp"), "analyse includes diagnose/present.hpp");
  EXPECT_EQ(include_violation("store", "text/format.hpp"), "");
  EXPECT_EQ(include_violation("text", "store/run_database.hpp"), "text includes store/run_database.hpp");
  EXPECT_EQ(include_violation("render", "launch/run_job.hpp"), "render includes launch/run_job.hpp");
  EXPECT_EQ(include_violation("launch", "analyse/syncs.hpp"), "launch includes analyse/syncs.hpp");
}

// What reads a run goes through store/'s typed rows: no stage above it writes SQL.
TEST(Layers, OnlyStoreReadsTheDatabase) {
  const std::filesystem::path root = std::filesystem::path(TRAINSHIM_SOURCE_DIR) / "viewer-cli";
  std::vector<std::string> found;
  for (const char* stage : {"text", "analyse", "diagnose", "render", "launch", "commands"})
    for (const auto& entry : std::filesystem::directory_iterator(root / stage)) {
      std::ifstream in(entry.path());
      for (std::string line; std::getline(in, line);)
        if (line.find("SELECT ") != std::string::npos || line.find("Statement ") != std::string::npos)
          found.push_back(std::string(stage) + "/" + entry.path().filename().string() + ": " + line);
    }
  EXPECT_TRUE(found.empty()) << ::testing::PrintToString(found);
}

TEST(Layers, ViewerCliKeepsItsStagesInOrder) {
  const std::vector<std::string> found = violations_under(std::filesystem::path(TRAINSHIM_SOURCE_DIR) / "viewer-cli");
  EXPECT_TRUE(found.empty()) << ::testing::PrintToString(found);
}

}  // namespace
