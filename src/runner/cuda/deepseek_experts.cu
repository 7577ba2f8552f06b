// DeepSeek-V3's expert projections over rows grouped by expert (deepseek_kernels.h): the routed experts' gate and up
// projections with SwiGLU fused, their down projection, and (one matrix, rows in order) the fp32 path's dense FP8
// projections. Weights e4m3 with 128 x 128 block scales (the checkpoint's format), or bf16 / f32 without.
//
// Version 1, correctness first, on CUDA cores (no tensor cores yet). Grid (tile, 128-output band): a block of 128
// threads takes one grouping tile (up to kDeepseekExpertTileRows rows of one expert) and the band of 128 weight rows
// that shares one row of scale blocks; thread j computes output row 128 * band + j (with SwiGLU its gate and its up
// row) for every row of the tile. Per 128-column block of K the block stages the tile's inputs as fp32 in shared
// memory (zero past the tile's rows), each thread widens its weight row's values 16 at a time (e4m3 exactly, through
// fp16) and sums their products with the inputs in fp32; the block's sum times its scale is then added into an fp32
// accumulator, DeepSeek's promotion per 128-K block (inference/kernel.py fp8_gemm). The activations stay as given
// (fp32 or bf16), so the fp32 path is W8A32 as the CPU reference is.
// What it costs: every weight byte is read once per tile of 16 rows, at 2 FMAs per weight byte and row; a
// decode step (1-16 rows per expert) reads each expert's weights once, but from one uncoalesced 16-byte load per
// thread per 16 values, and the FMAs run on CUDA cores. A bandwidth-bound decode path is still to build.
// Version 2 (deepseek_experts_wgmma.cu): the tensor-core grouped GEMM of issue 17 (wgmma e4m3 with fp32 promotion
// per K block) for the FP8 path's routed experts, chosen in the DeepSeek CUDA runner by
// CudaRunnerOptions::deepseek_experts or MOESERVE_DEEPSEEK_EXPERTS (deepseek_kernels.h), and the default; "v1" keeps
// every projection here.
// CPU reference: cpu::linear over the expert's deepseek_v3::Linear, then cpu::silu_mul.
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = static_cast<int>(kFp8Block);  // outputs of a block: one band of 128 x 128 weight blocks
constexpr int kRows = kDeepseekExpertTileRows;
constexpr int kChunk = 16;  // weight values widened at a time (one 16-byte load of e4m3)

// 16 consecutive weight values (16-byte aligned) as floats.
__device__ __forceinline__ void load16(const uint8_t* p, float (&w)[kChunk]) {
  const uint4 v = *reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t pair = e4m3x2_to_f16x2(word_of(v, q) >> (16 * h));
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&pair));
      w[4 * q + 2 * h] = f.x;
      w[4 * q + 2 * h + 1] = f.y;
    }
}
__device__ __forceinline__ void load16(const bf16* p, float (&w)[kChunk]) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint4 v = reinterpret_cast<const uint4*>(p)[half];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      w[8 * half + 2 * q] = __uint_as_float(word_of(v, q) << 16);
      w[8 * half + 2 * q + 1] = __uint_as_float(word_of(v, q) & 0xffff0000u);
    }
  }
}
__device__ __forceinline__ void load16(const float* p, float (&w)[kChunk]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 v = reinterpret_cast<const float4*>(p)[i];
    w[4 * i] = v.x;
    w[4 * i + 1] = v.y;
    w[4 * i + 2] = v.z;
    w[4 * i + 3] = v.w;
  }
}

// Tile `index`'s expert and rows: the grouping's tile, or for a dense projection rows 16 index .. of matrix 0.
__device__ __forceinline__ bool expert_tile(const DeepseekExpertParams& p, int index, MoeTile& tile) {
  if (p.routing.tile_expert != nullptr) return moe_tile(p.routing, index, tile);
  tile.expert = 0;
  tile.row0 = index * kRows;
  tile.row_end = p.rows;
  return tile.row0 < p.rows;
}

template <typename W, typename Act, bool kSwiglu>
__global__ void __launch_bounds__(kThreads) deepseek_experts_kernel(DeepseekExpertParams p) {
  pdl_prologue();
  __shared__ float xs[kRows][kThreads];
  MoeTile tile;
  if (!expert_tile(p, blockIdx.x, tile)) return;  // the whole block: no barrier is skipped by some threads only
  const int64_t N = p.w.rows, K = p.w.cols;
  const int64_t n = static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x;
  const bool active = n < N;
  const int rows = min(kRows, tile.row_end - tile.row0);
  const int64_t weight_at = tile.expert * p.w.values_per_matrix() + (active ? n : 0) * K;
  const W* gate = static_cast<const W*>(p.w.values) + weight_at;
  const W* up = kSwiglu ? static_cast<const W*>(p.up.values) + weight_at : nullptr;
  const int64_t scale_at = tile.expert * p.w.scales_per_matrix() + blockIdx.y * fp8_weight_scale_ld(K);
  const Act* x = static_cast<const Act*>(p.x);

  float acc_gate[kRows] = {}, acc_up[kRows] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kFp8Block) {
    const int width = static_cast<int>(min(static_cast<int64_t>(kFp8Block), K - k0));
    __syncthreads();  // the previous block's inputs are read
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float v = 0.0f;
      if (r < rows && threadIdx.x < width) {
        const int row = tile.row0 + r;
        const int64_t x_row = p.x_row != nullptr ? p.x_row[row] : row;
        v = to_float(x[x_row * K + k0 + threadIdx.x]);
      }
      xs[r][threadIdx.x] = v;
    }
    __syncthreads();
    if (!active) continue;
    float part_gate[kRows] = {}, part_up[kRows] = {};
    for (int c = 0; c < width; c += kChunk) {
      float wg[kChunk], wu[kChunk];
      load16(gate + k0 + c, wg);
      if constexpr (kSwiglu) load16(up + k0 + c, wu);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          part_gate[r] = fmaf(wg[i], xs[r][c + i], part_gate[r]);
          if constexpr (kSwiglu) part_up[r] = fmaf(wu[i], xs[r][c + i], part_up[r]);
        }
    }
    const int64_t kb = k0 / kFp8Block;
    const float scale_gate = p.w.scales != nullptr ? p.w.scales[scale_at + kb] : 1.0f;
    const float scale_up = kSwiglu && p.up.scales != nullptr ? p.up.scales[scale_at + kb] : 1.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      acc_gate[r] = fmaf(part_gate[r], scale_gate, acc_gate[r]);
      if constexpr (kSwiglu) acc_up[r] = fmaf(part_up[r], scale_up, acc_up[r]);
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) break;
    const int64_t row = tile.row0 + r;
    if constexpr (kSwiglu) {
      const float g = acc_gate[r];
      static_cast<Act*>(p.out)[row * N + n] = from_float<Act>(g / (1.0f + expf(-g)) * acc_up[r]);
    } else {
      static_cast<float*>(p.out)[row * N + n] = acc_gate[r];
    }
  }
}

template <typename W, typename Act>
void launch_typed(cudaStream_t stream, const DeepseekExpertParams& p, unsigned tiles) {
  const dim3 grid(tiles, static_cast<unsigned>(fp8_blocks(p.w.rows)));
  if (p.up.values != nullptr)
    MOESERVE_CUDA_CHECK(cuda_launch(deepseek_experts_kernel<W, Act, true>, grid, kThreads, 0, stream, p));
  else
    MOESERVE_CUDA_CHECK(cuda_launch(deepseek_experts_kernel<W, Act, false>, grid, kThreads, 0, stream, p));
}

template <typename W>
void launch_weight_typed(cudaStream_t stream, const DeepseekExpertParams& p, unsigned tiles) {
  if (p.x_type == Precision::bf16)
    launch_typed<W, bf16>(stream, p, tiles);
  else
    launch_typed<W, float>(stream, p, tiles);
}

void check_params(const DeepseekExpertParams& p) {
  const DeviceMatrix& w = p.w;
  MOESERVE_CHECK(w.values != nullptr && w.rows > 0 && w.cols > 0 && w.cols % kChunk == 0 && w.count >= 1,
                 "deepseek_experts: a [{}, {}] weight (x {}) must be non-empty with K a multiple of {}", w.rows, w.cols,
                 w.count, kChunk);
  MOESERVE_CHECK(w.type != WeightType::fp8_block || w.scales != nullptr, "deepseek_experts: an FP8 weight without scales");
  if (p.up.values != nullptr) {
    MOESERVE_CHECK(p.up.type == w.type && p.up.rows == w.rows && p.up.cols == w.cols && p.up.count == w.count &&
                       (w.type != WeightType::fp8_block || p.up.scales != nullptr),
                   "deepseek_experts: the up projection differs from the gate's [{}, {}]", w.rows, w.cols);
    MOESERVE_CHECK(p.out_type == p.x_type, "deepseek_experts: SwiGLU writes its output in the input's type");
  }
  const bool grouped = p.routing.tile_expert != nullptr;
  MOESERVE_CHECK(grouped ? p.routing.num_experts == w.count : w.count == 1,
                 "deepseek_experts: {} matrices for {} experts", w.count, grouped ? p.routing.num_experts : 1);
  MOESERVE_CHECK(p.rows >= 0 && p.rows <= (1 << 30), "deepseek_experts: {} rows", p.rows);
}

}  // namespace

DeepseekExpertsVersion parse_deepseek_experts_version(std::string_view name, std::string_view source) {
  if (name.empty()) return kDeepseekExpertsDefault;
  MOESERVE_CHECK(name == "v1" || name == "v2", "{} \"{}\": expected v1 or v2 (the DeepSeek routed experts' kernel)",
                 source, name);
  return name == "v1" ? DeepseekExpertsVersion::v1 : DeepseekExpertsVersion::v2;
}

DeepseekExpertsVersion deepseek_experts_version() {
  // A bad value throws out of the initialisation, so every call fails alike until the variable is fixed.
  static const DeepseekExpertsVersion version = [] {
    const char* value = std::getenv("MOESERVE_DEEPSEEK_EXPERTS");
    return parse_deepseek_experts_version(value != nullptr ? value : "", "MOESERVE_DEEPSEEK_EXPERTS");
  }();
  return version;
}

void launch_deepseek_experts(cudaStream_t stream, const DeepseekExpertParams& params, DeepseekExpertsVersion version) {
  check_params(params);
  if (params.rows == 0) return;
  const bool grouped = params.routing.tile_expert != nullptr;
  // Version 2 takes what it was built for, the FP8 path's routed experts (deepseek_kernels.h); the rest stays here.
  if (version == DeepseekExpertsVersion::v2 && grouped && params.w.type == WeightType::fp8_block &&
      params.x_type == Precision::bf16) {
    launch_deepseek_experts_wgmma(stream, params);
    return;
  }
  const int tiles = grouped ? moe_max_tiles(params.rows, kRows, params.routing.num_experts)
                            : (params.rows + kRows - 1) / kRows;
  switch (params.w.type) {
    case WeightType::fp8_block:
      launch_weight_typed<uint8_t>(stream, params, static_cast<unsigned>(tiles));
      break;
    case WeightType::bf16:
      launch_weight_typed<bf16>(stream, params, static_cast<unsigned>(tiles));
      break;
    case WeightType::f32:
      launch_weight_typed<float>(stream, params, static_cast<unsigned>(tiles));
      break;
  }
}

}  // namespace moeserve::cuda
