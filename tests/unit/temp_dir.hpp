#pragma once
// A directory of its own for a test that writes files, removed with everything in it afterwards.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace trainshim::test {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "trainshim_test") : path_(make(prefix)) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  static std::string make(const std::string& prefix) {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("cannot create a directory " + pattern);
    return pattern;
  }

  std::string path_;
};

// The fixture of such tests: dir_ exists from the fixture's construction (before SetUp) until
// after TearDown.
class TempDirTest : public ::testing::Test {
 protected:
  TempDir temp_dir_;
  const std::string dir_ = temp_dir_.path();
};

}  // namespace trainshim::test
