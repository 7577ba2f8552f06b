// --synthetic-router's values: what each means, and a clear error for anything else.
#include <gtest/gtest.h>

#include "runner/cuda/cuda_runner_factory.h"
#include "util/error.h"

namespace moeserve {
namespace {

TEST(SyntheticRouter, NamesParseToTheirSkew) {
  EXPECT_EQ(parse_synthetic_router("uniform"), 0.0);
  EXPECT_EQ(parse_synthetic_router("zipf"), 1.0);
  EXPECT_EQ(parse_synthetic_router("zipf:0.5"), 0.5);
  EXPECT_EQ(parse_synthetic_router("zipf:2"), 2.0);
}

TEST(SyntheticRouter, AnythingElseIsAnErrorNamingTheValue) {
  for (const char* bad : {"", "zipf:", "zipf:0", "zipf:-1", "zipf:9", "zipf:1x", "zipf:nan", "Zipf", "skewed"}) {
    try {
      parse_synthetic_router(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("\"") + bad + "\""), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace moeserve
