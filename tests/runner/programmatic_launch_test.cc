// The switch for programmatic dependent launch (runner/cuda/programmatic_launch.h) without a GPU: what
// MOESERVE_PDL's values mean, that the setter overrides the environment, and that the attribute is asked for only
// when the switch is on and never on a default stream.
#include "runner/cuda/programmatic_launch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace moeserve::cuda {
namespace {

TEST(ProgrammaticLaunch, EnvironmentValues) {
  EXPECT_FALSE(parse_programmatic_launch_env(nullptr));
  EXPECT_FALSE(parse_programmatic_launch_env(""));
  EXPECT_FALSE(parse_programmatic_launch_env("0"));
  EXPECT_TRUE(parse_programmatic_launch_env("1"));
  for (const char* bad : {"yes", "true", "on", "2", " 1", "1 ", "01"}) {
    try {
      parse_programmatic_launch_env(bad);
      ADD_FAILURE() << "MOESERVE_PDL=" << bad << " was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("MOESERVE_PDL"), std::string::npos) << message;
      EXPECT_NE(message.find(bad), std::string::npos) << message;
    }
  }
}

// The setter wins over the environment, even a value the environment would refuse.
TEST(ProgrammaticLaunch, SetterOverridesEnvironment) {
  ASSERT_EQ(setenv("MOESERVE_PDL", "garbage", 1), 0);
  set_programmatic_launch(true);
  EXPECT_TRUE(programmatic_launch_enabled());
  set_programmatic_launch(false);
  EXPECT_FALSE(programmatic_launch_enabled());
  unsetenv("MOESERVE_PDL");
}

TEST(ProgrammaticLaunch, AskedForOnlyWhenOnAndNeverOnADefaultStream) {
  constexpr std::uintptr_t kOwnStream = 0x7f00deadbee0;  // what cudaStreamCreate hands out: a real address
  for (const std::uintptr_t stream : {kNullStream, kLegacyStream, kPerThreadStream}) {
    EXPECT_TRUE(is_default_stream(stream));
    EXPECT_FALSE(request_programmatic_launch(true, stream)) << stream;
    EXPECT_FALSE(request_programmatic_launch(false, stream)) << stream;
  }
  EXPECT_FALSE(is_default_stream(kOwnStream));
  EXPECT_TRUE(request_programmatic_launch(true, kOwnStream));
  EXPECT_FALSE(request_programmatic_launch(false, kOwnStream));
}

}  // namespace
}  // namespace moeserve::cuda
