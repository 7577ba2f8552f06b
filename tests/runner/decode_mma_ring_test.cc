// decode_mma's ring and occupancy choice (runner/cuda/decode_mma_ring.h) without a GPU: what
// MOESERVE_DECODE_MMA_RING's values mean, which rings each width takes, that names parse back to the same choice, and
// that the setter overrides the environment.
#include "runner/cuda/decode_mma_ring.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace moeserve::cuda {
namespace {

TEST(DecodeMmaRing, StagesAndBlocksFitTheSharedMemoryAndRegisters) {
  // A stage of the 8-row kernel: 16 KB of MXFP4 blocks, 2 KB of scale words, 8 token rows of 256 bytes.
  constexpr int kStageBytes8 = 16 * 1024 + 2 * 1024 + 8 * 256;
  for (DecodeMmaRing ring : {DecodeMmaRing::r4x2, DecodeMmaRing::r3x3, DecodeMmaRing::r2x4}) {
    const int stages = decode_mma_ring_stages(ring), blocks = decode_mma_ring_blocks(ring);
    EXPECT_GE(stages, 2) << decode_mma_ring_name(ring);  // a ring of one stage could not overlap copy and compute
    EXPECT_LE(stages * kStageBytes8 * blocks, 227 * 1024) << decode_mma_ring_name(ring);
    EXPECT_EQ(decode_mma_ring_name(ring), std::to_string(stages) + "x" + std::to_string(blocks));
  }
  EXPECT_EQ(decode_mma_ring_name(DecodeMmaRing::r4x2), "4x2");
  EXPECT_EQ(decode_mma_ring_name(DecodeMmaRing::r3x3), "3x3");
  EXPECT_EQ(decode_mma_ring_name(DecodeMmaRing::r2x4), "2x4");
}

TEST(DecodeMmaRing, EnvironmentValues) {
  EXPECT_EQ(parse_decode_mma_rings(nullptr), kDecodeMmaRingsDefault);
  EXPECT_EQ(parse_decode_mma_rings(""), kDecodeMmaRingsDefault);
  EXPECT_EQ(kDecodeMmaRingsDefault.n8, DecodeMmaRing::r4x2);
  EXPECT_EQ(kDecodeMmaRingsDefault.n16, DecodeMmaRing::r4x2);
  const DecodeMmaRings both = parse_decode_mma_rings("n8:2x4,n16:3x3");
  EXPECT_EQ(both.n8, DecodeMmaRing::r2x4);
  EXPECT_EQ(both.n16, DecodeMmaRing::r3x3);
  // A width not named keeps its default; order does not matter.
  EXPECT_EQ(parse_decode_mma_rings("n16:3x3").n8, DecodeMmaRing::r4x2);
  EXPECT_EQ(parse_decode_mma_rings("n16:3x3,n8:3x3"), (DecodeMmaRings{DecodeMmaRing::r3x3, DecodeMmaRing::r3x3}));
  for (const char* bad : {"3x3", "n8:", "n8:5x1", "n32:3x3", "n16:2x4", "n8:3x3,n8:2x4", "n8:3x3,", " n8:3x3",
                          "n8=3x3", "n8:3X3"}) {
    try {
      parse_decode_mma_rings(bad);
      ADD_FAILURE() << "MOESERVE_DECODE_MMA_RING=" << bad << " was accepted";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("MOESERVE_DECODE_MMA_RING"), std::string::npos) << message;
      EXPECT_NE(message.find(bad), std::string::npos) << message;
    }
  }
  try {
    parse_decode_mma_rings("n8:9x9", "--decode-mma-rings");
    ADD_FAILURE() << "n8:9x9 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--decode-mma-rings"), std::string::npos) << e.what();
  }
}

TEST(DecodeMmaRing, NamesParseBack) {
  for (DecodeMmaRing n8 : {DecodeMmaRing::r4x2, DecodeMmaRing::r3x3, DecodeMmaRing::r2x4})
    for (DecodeMmaRing n16 : {DecodeMmaRing::r4x2, DecodeMmaRing::r3x3}) {
      const DecodeMmaRings rings{n8, n16};
      const std::string name = decode_mma_rings_name(rings);
      EXPECT_EQ(parse_decode_mma_rings(name.c_str()), rings) << name;
    }
  EXPECT_EQ(decode_mma_rings_name(kDecodeMmaRingsDefault), "n8:4x2,n16:4x2");
}

// The setter wins over the environment, even a value the environment would refuse.
TEST(DecodeMmaRing, SetterOverridesEnvironment) {
  ASSERT_EQ(setenv("MOESERVE_DECODE_MMA_RING", "garbage", 1), 0);
  const DecodeMmaRings rings{DecodeMmaRing::r3x3, DecodeMmaRing::r3x3};
  set_decode_mma_rings(rings);
  EXPECT_EQ(decode_mma_rings(), rings);
  set_decode_mma_rings(kDecodeMmaRingsDefault);
  EXPECT_EQ(decode_mma_rings(), kDecodeMmaRingsDefault);
  unsetenv("MOESERVE_DECODE_MMA_RING");
}

}  // namespace
}  // namespace moeserve::cuda
