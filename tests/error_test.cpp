// runtime/base/error.hpp: printable(), which every message the command line
// prints goes through, so that quoted input cannot drive the terminal.
#include "runtime/base/error.hpp"

#include <gtest/gtest.h>

#include <string>

namespace accord {
namespace {

TEST(Printable, KeepsPrintableTextAndUtf8) {
  for (const std::string text :
       {"bad fault '1:Execution(0->1)': \\ \"quoted\"", "caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80", ""}) {
    EXPECT_EQ(printable(text), text);
  }
}

TEST(Printable, EscapesControlBytesAndInvalidUtf8) {
  EXPECT_EQ(printable("a\x1B[2Jb"), "a\\x1B[2Jb");
  EXPECT_EQ(printable("bell\x07 del\x7F"), "bell\\x07 del\\x7F");
  EXPECT_EQ(printable("line\nnext\ttab\rover"), "line\nnext\ttab\\x0Dover");  // layout kept, \r could hide text
  EXPECT_EQ(printable(std::string("nul\0byte", 8)), "nul\\x00byte");
  EXPECT_EQ(printable("\xC2\x9B"
                      "31m"),
            "\\xC2\\x9B31m");                            // U+009B, the C1 control sequence introducer
  EXPECT_EQ(printable("\xFF x \xC3"), "\\xFF x \\xC3");  // not UTF-8; a sequence cut short
  EXPECT_EQ(printable("\xC0\xAF"), "\\xC0\\xAF");        // an overlong '/'
}

TEST(Printable, EscapingTwiceChangesNothingMore) {
  const std::string once = printable("\x1B]0;title\x07\xFF\n");
  EXPECT_EQ(printable(once), once);
}

}  // namespace
}  // namespace accord
