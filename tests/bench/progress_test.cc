// Progress for long jobs: the counts and ETA of a job of known size (eval's samples, specbench's turns), and
// plain lines, not a redrawn one, when stderr is not a terminal.
#include "bench/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace moeserve::bench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(WorkProgress, CountsFailuresTokensAndSaysWhenDone) {
  WorkProgress progress("eval: generating", 4);
  EXPECT_THAT(progress.status(), HasSubstr("eval: generating: 0/4 done, 0 failed | 0 tokens"));
  EXPECT_THAT(progress.status(), HasSubstr("ETA ?"));
  progress.finished(100, false);
  progress.finished(0, true);
  EXPECT_THAT(progress.status(), HasSubstr("2/4 done, 1 failed | 100 tokens"));
  EXPECT_THAT(progress.status(), HasSubstr("ETA "));
  progress.finished(50, false);
  progress.finished(50, false);
  EXPECT_THAT(progress.status(), HasSubstr("4/4 done, 1 failed | 200 tokens"));
  EXPECT_THAT(progress.status(), HasSubstr(", done"));
}

TEST(ProgressLine, OffATerminalPrintsWholeLines) {
  ::testing::internal::CaptureStderr();
  {
    ProgressLine line([] { return std::string("working"); }, ProgressMode::lines);
    line.finish();  // a short job prints its final line only
  }
  const std::string lines = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(lines, "working\n");
  ::testing::internal::CaptureStderr();
  {
    ProgressLine line([] { return std::string("working"); }, ProgressMode::terminal);
    line.finish();
  }
  const std::string redrawn = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(redrawn, HasSubstr("\rworking"));
  ::testing::internal::CaptureStderr();
  {
    ProgressLine line([] { return std::string("working"); }, ProgressMode::off);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(ShortDuration, ReadsAsAPersonWouldSayIt) {
  EXPECT_EQ(short_duration(42.4), "42s");
  EXPECT_EQ(short_duration(185), "3m05s");
  EXPECT_EQ(short_duration(3720), "1h02m");
  EXPECT_EQ(short_duration(-1), "?");
}

}  // namespace
}  // namespace moeserve::bench
