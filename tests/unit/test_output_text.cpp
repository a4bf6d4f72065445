// What the CLI makes of recorded strings before printing or writing them.
#include <gtest/gtest.h>

#include "text/output_text.hpp"

namespace trainshim::cli {
namespace {

TEST(OutputText, ValidUtf8ReplacesEachBadSequenceAndKeepsGoodOnes) {
  EXPECT_EQ(valid_utf8("caf\xe9.bin"), "caf\xEF\xBF\xBD.bin");
  EXPECT_EQ(valid_utf8("µs \xE2\x82\xAC \xF0\x9F\x98\x80"), "µs \xE2\x82\xAC \xF0\x9F\x98\x80");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong '/'
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(valid_utf8("\xE2\x82"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // cut short
}

TEST(OutputText, TerminalTextEscapesControlsButNotNewlines) {
  EXPECT_EQ(terminal_text("\x1b]0;pwned\x1b\\\x1b[2Jloss.item()\n"), "\\x1b]0;pwned\\x1b\\\\x1b[2Jloss.item()\n");
  EXPECT_EQ(terminal_text(std::string("a\0b\rc\td\x7f", 8)), "a\\x00b\\x0dc\\x09d\\x7f");
  EXPECT_EQ(terminal_text("\xC2\x9B"
                          "31m 3.41 µs"),
            "\\u009b31m 3.41 µs");
  EXPECT_EQ(terminal_text("\x9B"
                          "31m caf\xe9"),
            "\xEF\xBF\xBD"
            "31m caf\xEF\xBF\xBD");
}

TEST(OutputText, XmlTextIsWellFormedCharacterData) {
  EXPECT_EQ(xml_text("<a href=\"x\">&'</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&apos;&lt;/a&gt;");
  EXPECT_EQ(xml_text("\x1b[31mred\x01\t\n\r\xe9 \xEF\xBF\xBE"), "[31mred\t\n\r\xEF\xBF\xBD ");
}

TEST(OutputText, JsonTextReplacesBytesThatAreNotUtf8) {
  EXPECT_EQ(json_text(nlohmann::json{{"command", "caf\xe9"}}, -1), "{\"command\":\"caf\xEF\xBF\xBD\"}");
  EXPECT_EQ(json_text(nlohmann::ordered_json{{"source", "\x1b[2J"}}, -1), "{\"source\":\"\\u001b[2J\"}");
}

// Paths under the reader's directory are written relative to it; a longer path that merely
// contains it, another directory's, and "/" as the directory are left whole.
TEST(ReaderText, PathsUnderTheDirectoryAreRelative) {
  const std::string dir = "/home/me/proj";
  EXPECT_EQ(reader_text("at /home/me/proj/scripts/train.py:66 in main", dir), "at scripts/train.py:66 in main");
  EXPECT_EQ(reader_text("/home/me/proj/a.py (/home/me/proj/b.py) '/home/me/proj/c.py'", dir), "a.py (b.py) 'c.py'");
  EXPECT_EQ(reader_text("/home/me/project2/a.py /x/home/me/proj/a.py", dir),
            "/home/me/project2/a.py /x/home/me/proj/a.py");
  EXPECT_EQ(reader_text("/home/me/proj/a.py", "/"), "/home/me/proj/a.py");
  EXPECT_EQ(reader_text("/home/me/proj/a\x1b.py", dir), "a\\x1b.py");
}

}  // namespace
}  // namespace trainshim::cli
