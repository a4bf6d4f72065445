// Files the collector opens because a segment names them (reliability review, section 7).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "named_file.hpp"
#include "process_stacks.hpp"
#include "symbolizer.hpp"
#include "temp_dir.hpp"

namespace trainshim::collector {
namespace {

class NamedFileTest : public test::TempDirTest {
 protected:
  void SetUp() override { ASSERT_EQ(mkfifo(fifo_.c_str(), 0600), 0); }
  const std::string fifo_ = dir_ + "/fifo";
};

// Each of these would block (a FIFO nobody writes to) or never end (/dev/zero) if opened as files.
TEST_F(NamedFileTest, OnlyRegularFilesAreOpened) {
  EXPECT_EQ(open_regular_file(fifo_), -1);
  EXPECT_EQ(open_regular_file("/dev/zero"), -1);
  EXPECT_EQ(open_regular_file(dir_), -1);
  EXPECT_EQ(open_regular_file(dir_ + "/absent"), -1);
  EXPECT_FALSE(read_regular_file(fifo_, 100).has_value());
  EXPECT_FALSE(read_regular_file("/dev/zero", 100).has_value());
  EXPECT_EQ(source_line(fifo_, 1), "");
  EXPECT_EQ(source_line("/dev/zero", 1), "");
  EXPECT_EQ(build_id_of_file(fifo_), "");
  Symbolizer symbolizer;
  symbolizer.add_module({fifo_, 0x400000, ""});
  EXPECT_EQ(symbolizer.resolve(0x400100).function, "");
}

TEST_F(NamedFileTest, FilesOverTheLimitAreNotRead) {
  const std::string file = dir_ + "/ten.py";
  std::ofstream(file) << "123456789\n";
  EXPECT_FALSE(read_regular_file(file, 9).has_value());
  EXPECT_EQ(read_regular_file(file, 10), "123456789\n");
  // Links are followed: installed Python sources are reached through them.
  const std::string link = dir_ + "/link.py";
  std::filesystem::create_symlink(file, link);
  EXPECT_EQ(source_line(link, 1), "123456789");
}

}  // namespace
}  // namespace trainshim::collector
