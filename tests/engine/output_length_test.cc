#include "engine/output_length.h"

#include <gtest/gtest.h>

namespace moeserve {
namespace {

TEST(OutputLengthEstimate, ExpectsWhatAllButOneInAHundredOfThoseThatGotAsFarReached) {
  OutputLengthEstimate lengths;
  EXPECT_EQ(lengths.likely_length(0), 0);  // nothing finished yet
  for (int n = 1; n <= 1000; ++n) lengths.observe(n);
  EXPECT_EQ(lengths.likely_length(0), 11);      // 1,000 longer: the 11th shortest
  EXPECT_EQ(lengths.likely_length(500), 506);   // 500 longer: the 6th of them
  EXPECT_EQ(lengths.likely_length(950), 951);   // fewer than 100 longer: the shortest of them
  EXPECT_EQ(lengths.likely_length(1000), 0);    // none longer
}

TEST(OutputLengthEstimate, KeepsTheRecentWindow) {
  OutputLengthEstimate lengths(4);
  for (int n : {900, 800, 10, 20, 30, 40}) lengths.observe(n);
  EXPECT_EQ(lengths.likely_length(0), 10);
  EXPECT_EQ(lengths.likely_length(40), 0);  // 900 and 800 left the window
}

TEST(OutputLengthEstimate, OnlyStopTokensOrAGrammarEndARequestEarly) {
  RequestSpec spec;
  EXPECT_FALSE(may_stop_early(spec));
  spec.stop_tokens = {200002};
  EXPECT_TRUE(may_stop_early(spec));
}

}  // namespace
}  // namespace moeserve
