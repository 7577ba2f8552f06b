#include "runner/cuda/decode_mma_ring.h"

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include "util/error.h"

namespace moeserve::cuda {
namespace {

std::mutex rings_mutex;
std::optional<DecodeMmaRings> chosen_rings;  // guarded by rings_mutex

std::optional<DecodeMmaRing> ring_of(std::string_view name) {
  for (DecodeMmaRing ring : {DecodeMmaRing::r4x2, DecodeMmaRing::r3x3, DecodeMmaRing::r2x4})
    if (name == decode_mma_ring_name(ring)) return ring;
  return std::nullopt;
}

}  // namespace

int decode_mma_ring_stages(DecodeMmaRing ring) {
  switch (ring) {
    case DecodeMmaRing::r3x3: return 3;
    case DecodeMmaRing::r2x4: return 2;
    default: return 4;
  }
}

int decode_mma_ring_blocks(DecodeMmaRing ring) {
  switch (ring) {
    case DecodeMmaRing::r3x3: return 3;
    case DecodeMmaRing::r2x4: return 4;
    default: return 2;
  }
}

std::string decode_mma_ring_name(DecodeMmaRing ring) {
  return fmt::format("{}x{}", decode_mma_ring_stages(ring), decode_mma_ring_blocks(ring));
}

DecodeMmaRings parse_decode_mma_rings(const char* text, std::string_view source) {
  DecodeMmaRings rings;
  if (text == nullptr || *text == '\0') return rings;
  const std::string_view all(text);
  bool seen8 = false, seen16 = false;
  size_t start = 0;
  while (start <= all.size()) {
    const size_t end = std::min(all.find(',', start), all.size());
    const std::string_view item = all.substr(start, end - start);
    const size_t colon = item.find(':');
    MOESERVE_CHECK(colon != std::string_view::npos,
                   "{}='{}': item '{}' is not WIDTH:RING (e.g. n8:3x3,n16:3x3)", source, all, item);
    const std::string_view width = item.substr(0, colon), name = item.substr(colon + 1);
    const std::optional<DecodeMmaRing> ring = ring_of(name);
    MOESERVE_CHECK(ring.has_value(), "{}='{}': '{}' is not a ring (4x2, 3x3 or 2x4)", source, all, name);
    if (width == "n8") {
      MOESERVE_CHECK(!seen8, "{}='{}': n8 named twice", source, all);
      seen8 = true;
      rings.n8 = *ring;
    } else if (width == "n16") {
      MOESERVE_CHECK(!seen16, "{}='{}': n16 named twice", source, all);
      MOESERVE_CHECK(*ring != DecodeMmaRing::r2x4,
                     "{}='{}': n16 takes 4x2 or 3x3 (its 2x4 build spills at 64 registers)", source, all);
      seen16 = true;
      rings.n16 = *ring;
    } else {
      fail("{}='{}': width '{}' is not n8 or n16", source, all, width);
    }
    start = end + 1;
  }
  return rings;
}

std::string decode_mma_rings_name(const DecodeMmaRings& rings) {
  return fmt::format("n8:{},n16:{}", decode_mma_ring_name(rings.n8), decode_mma_ring_name(rings.n16));
}

DecodeMmaRings decode_mma_rings() {
  std::lock_guard lock(rings_mutex);
  if (!chosen_rings) chosen_rings = parse_decode_mma_rings(std::getenv("MOESERVE_DECODE_MMA_RING"));
  return *chosen_rings;
}

void set_decode_mma_rings(const DecodeMmaRings& rings) {
  std::lock_guard lock(rings_mutex);
  chosen_rings = rings;
}

}  // namespace moeserve::cuda
