// decode_mma's cp.async ring and occupancy (runner/cuda/moe_decode_mma.cu), per tile width: how many 128-k chunks a
// CTA's ring holds ("stages") and how many CTAs of 8 warps an SM is launched to hold ("blocks"), written
// STAGESxBLOCKS. The 8-row kernel takes 4x2 (20 KB a stage: 160 KB of shared memory and 16 warps an SM, at most 128
// registers), 3x3 (180 KB, 24 warps, 80 registers) or 2x4 (160 KB, 32 warps, 64 registers); the 16-row kernel 4x2
// or 3x3 (its 2x4 build spills: 64 registers). ncu on an H200 showed the 8-row kernel issuing on 57% of its cycles
// with 1.3 eligible warps of 3.9 a scheduler (docs/PERF.md), which more resident warps may fill; what wins is
// measured (moe_bench --decode-mma-rings), not assumed. No CUDA here: the choice is tested without a GPU. C++17: the
// CUDA files include it.
#pragma once

#include <string>
#include <string_view>

namespace moeserve::cuda {

enum class DecodeMmaRing { r4x2, r3x3, r2x4 };

struct DecodeMmaRings {
  DecodeMmaRing n8 = DecodeMmaRing::r4x2;   // the 8-row tiles (decode-mma-n8 and mixed's 8-row class)
  DecodeMmaRing n16 = DecodeMmaRing::r4x2;  // the 16-row tiles (decode-mma-n16 and mixed's 16-row class)
};
inline bool operator==(const DecodeMmaRings& a, const DecodeMmaRings& b) { return a.n8 == b.n8 && a.n16 == b.n16; }

// The rings the runner uses when nothing sets them.
inline constexpr DecodeMmaRings kDecodeMmaRingsDefault{};

int decode_mma_ring_stages(DecodeMmaRing ring);
int decode_mma_ring_blocks(DecodeMmaRing ring);
std::string decode_mma_ring_name(DecodeMmaRing ring);  // "4x2", "3x3", "2x4"

// "n8:3x3,n16:3x3": a comma-separated list of WIDTH:RING (widths n8 and n16, each at most once; a width not named
// keeps its default); unset (nullptr) or "" is the default. Anything else, or a ring the width does not take
// (n16:2x4), throws an Error naming the text. MOESERVE_DECODE_MMA_RING's value and moe_bench's --decode-mma-rings.
// `source` names where the text came from in the error.
DecodeMmaRings parse_decode_mma_rings(const char* text, std::string_view source = "MOESERVE_DECODE_MMA_RING");
std::string decode_mma_rings_name(const DecodeMmaRings& rings);  // "n8:4x2,n16:4x2": parses back to the same

// The process-wide choice: set_decode_mma_rings()'s last value, else MOESERVE_DECODE_MMA_RING read once at the first
// call (a bad value throws there).
DecodeMmaRings decode_mma_rings();
void set_decode_mma_rings(const DecodeMmaRings& rings);

}  // namespace moeserve::cuda
