// runtime/base/assert.hpp: ACCORD_ASSERT stays on in Release, aborts with
// the file, the condition and the message, and evaluates its condition once.
#include "runtime/base/assert.hpp"

#include <gtest/gtest.h>

#include "runtime/base/error.hpp"

namespace accord {
namespace {

// The tests before these may have started thread pools: fork and re-run
// the binary rather than fork a process with threads.
class AssertDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(AssertDeathTest, AFalseConditionAbortsWithItsFileConditionAndMessage) {
  const int rank = 3, rank_count = 2;
  EXPECT_DEATH(ACCORD_ASSERT(rank < rank_count, "a rank index is below the rank count"),
               "assert_test\\.cpp:[0-9]+: ACCORD_ASSERT\\(rank < rank_count\\) failed: "
               "a rank index is below the rank count");
}

TEST_F(AssertDeathTest, TheValueOfAFailedResultAborts) {
  const Result<int> failed = Error(ErrorCode::state, "no value");
  EXPECT_DEATH((void)failed.value(), "the value of a Result that holds an error");
  const Status ok;
  EXPECT_DEATH((void)ok.error(), "the error of a Status that is ok");
}

TEST(Assert, ATrueConditionPassesAndIsEvaluatedOnce) {
  int evaluated = 0;
  ACCORD_ASSERT(++evaluated == 1, "the condition is evaluated once");
  EXPECT_EQ(evaluated, 1);
  // A statement of its own: it takes no braces after an if.
  if (evaluated > 0)
    ACCORD_ASSERT(evaluated == 1, "still once");
  else
    ACCORD_ASSERT(false, "not reached");
  EXPECT_EQ(evaluated, 1);
}

TEST(Assert, AResultHoldsItsValueOrError) {
  Result<int> value = 7;
  EXPECT_EQ(value.value(), 7);
  const Result<int> error = Error(ErrorCode::io, "gone");
  EXPECT_EQ(error.error().code(), ErrorCode::io);
}

}  // namespace
}  // namespace accord
