// DeepSeek-V3's routed experts on Hopper's tensor cores: version 2 of launch_deepseek_experts (deepseek_kernels.h),
// the FP8 grouped GEMM issue 17 asks for, for sm_90a. The DeepSeek CUDA runner's default since its tests passed on
// an H200 and an H100 and compute-sanitizer's racecheck and memcheck came back clean on an H100 (binaries of
// 09cef2e, 2026-12-07; docs/PERF.md); version 1 (deepseek_experts.cu, CUDA cores) stays selectable.
//
// A first cut, correctness first. The activations are quantised first, DeepSeek's act_quant
// (launch_fp8_quantize_activations: e4m3 with one fp32 scale per token per 128 columns). Then one CTA per
// (tile of up to 128 grouped rows of one expert, 128 weight rows), a simple grid:
// - Row tiles are cut from the grouping's expert_offsets (each expert's rows in tiles of 128, expert by expert), so
//   any grouping tile size serves; warp 0 finds the CTA's tile by a scan over the experts' tile counts.
// - Weight rows: 128 of the projection, or with SwiGLU 64 gate rows then the same 64 up rows, so that output
//   column c's gate (accumulator column c) and up (column c + 64) land in the same thread (fragment column
//   blocks j and j + 8). Either way a tile's rows lie in one 128-row band of weight scale blocks.
// - One producer warpgroup copies, per 128-column block of K (one scale block, one 128-byte row of e4m3), the
//   tile's activation rows (gathered through x_row) and weight rows into 128-byte-swizzled shared tiles with
//   cp.async (16 bytes, zero past the rows, N and K), the rows' activation scales and the block's weight scale(s),
//   into a ring of 4 stages; a stage's "full" barrier completes once every copy landed (cp.async.mbarrier.arrive).
// - Two consumer warpgroups (64 rows each): per stage, four wgmma m64n128k32 e4m3 (both operands from shared
//   memory) into a block accumulator, wait for them, then on the CUDA cores acc += block x a_scale(row) x
//   w_scale(block): DeepSeek's promotion every 128 k (their report, section 3.3.2: Hopper's FP8 tensor cores keep
//   about 14 bits of the sum; DeepGEMM promotes the same way). The stage goes back to the producer once its
//   wgmmas and the scale reads are done. The other warpgroup's wgmmas overlap one's promotion.
// - Epilogue: SwiGLU (silu(gate) x up) in bf16, or the projection in fp32; per element, past a partial tile's rows
//   and past N nothing.
// Costs to look at after the first GPU run: a CTA per tile (no persistence, the pipeline drains per tile), one
// block accumulator (each k block waits for its own wgmmas), 16-byte cp.async for everything (TMA could copy the
// weight tiles), scalar stores.
// CPU reference: cpu::linear over the expert's deepseek_v3::Linear on the activations act_quant rounded
// (quantize_activations_fp8, dequantised), then cpu::silu_mul.
#include "runner/cuda/deepseek_kernels.h"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_wgmma.cuh"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

constexpr int kTileM = 128;  // grouped rows of a CTA: two consumer warpgroups of m64
constexpr int kTileN = 128;  // wgmma n128: weight rows of a CTA (64 gate + 64 up with SwiGLU)
constexpr int kTileK = static_cast<int>(kFp8Block);  // k of a stage: one scale block, one swizzled row of e4m3
static_assert(kTileK == kSwizzleRowBytes);
constexpr int kStages = 4;
constexpr int kProducerThreads = 128, kConsumerGroups = 2, kConsumerWarps = 4 * kConsumerGroups;
constexpr int kThreads = kProducerThreads + 32 * kConsumerWarps;
constexpr int kAccumulators = kTileN / 2;  // fp32 a thread holds of an m64 x n128 product
constexpr int kCopiesPerThread = kTileM * (kSwizzleRowBytes / 16) / kProducerThreads;  // 16-byte chunks of A (and B)
static_assert(kTileN == kTileM);  // the producer copies B's rows as it copies A's

// Shared memory: A stages, B stages, each stage's scales (the tile rows' activation scales, then the weight scale of
// the gate or only projection and of the up projection), then the barriers (full, empty).
constexpr int kABytes = kTileM * kSwizzleRowBytes, kBBytes = kTileN * kSwizzleRowBytes;
constexpr int kScaleFloats = kTileM + 4;
constexpr int kBOffset = kStages * kABytes;
constexpr int kScaleOffset = kBOffset + kStages * kBBytes;
constexpr int kBarrierOffset = kScaleOffset + kStages * kScaleFloats * 4;
constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + kSwizzleAtomBytes;  // + slack to align
static_assert(kABytes % kSwizzleAtomBytes == 0 && kBBytes % kSwizzleAtomBytes == 0 && kBarrierOffset % 8 == 0 &&
              kSharedBytes <= 227 * 1024);

struct Shared {
  unsigned char* base;
  uint64_t* full;
  uint64_t* empty;
  __device__ unsigned char* a(int stage) const { return base + stage * kABytes; }
  __device__ unsigned char* b(int stage) const { return base + kBOffset + stage * kBBytes; }
  __device__ float* scales(int stage) const {
    return reinterpret_cast<float*>(base + kScaleOffset) + stage * kScaleFloats;
  }
};

// A CTA's work: grouped rows row0 .. row0 + rows - 1 of `expert` (expert -1: past the step's tiles), weight rows
// from n0 (of both matrices with SwiGLU).
struct Tile {
  int expert, row0, rows;
  int64_t n0;
};

// d (+)= a * b for m64 n128 k32, e4m3 operands, both K-major in shared memory (descriptors), fp32 accumulators;
// accumulate = false overwrites d. Fragment of d as moe_wgmma.cuh's m64nNk16: register 4j + 2h + i holds row g + 8h
// of the warp's 16, column 8j + 2c + i (g = lane / 4, c = lane % 4).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_ss(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1;\n}\n"
      : MOESERVE_WGMMA_D64
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// Row tile `index` of the grouping, cut expert by expert into tiles of kTileM rows from expert_offsets. One whole
// warp calls it; lane 0 or the lane that finds the tile writes `tile` (expert -1 when index is past the last).
__device__ void find_row_tile(const MoeRouting& r, int index, Tile& tile) {
  const int lane = threadIdx.x % 32;
  int before = 0;  // tiles of the experts before this chunk of 32
  for (int e0 = 0; e0 < r.num_experts; e0 += 32) {
    const int e = e0 + lane;
    const int count = e < r.num_experts ? r.expert_offsets[e + 1] - r.expert_offsets[e] : 0;
    const int tiles = (count + kTileM - 1) / kTileM;
    int through = tiles;  // inclusive prefix sum over the chunk
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int v = __shfl_up_sync(~0u, through, d);
      if (lane >= d) through += v;
    }
    const int first = before + through - tiles;
    const unsigned hit = __ballot_sync(~0u, index >= first && index < first + tiles);
    if (hit != 0) {
      if (lane == __ffs(static_cast<int>(hit)) - 1) {
        tile.expert = e;
        tile.row0 = r.expert_offsets[e] + (index - first) * kTileM;
        tile.rows = min(kTileM, r.expert_offsets[e + 1] - tile.row0);
      }
      return;
    }
    before += __shfl_sync(~0u, through, 31);
  }
  if (lane == 0) tile.expert = -1;
}

// ---- producer --------------------------------------------------------------------------------------------------
// Thread t copies chunk t % 8 of tile rows t / 8 + 16 i of A and of B (i < 4: B rows 0..63, the gate's with SwiGLU;
// i >= 4: 64..127, the up projection's), tile row t's activation scale, and (t < 2) weight scale t.
template <bool kSwiglu>
__device__ void produce(const DeepseekExpertParams& p, const Shared& s, const Tile& tile, int kblocks) {
  const int t = threadIdx.x, chunk = t % 8;
  const int64_t N = p.w.rows, K = p.w.cols;
  const uint8_t* x = p.x_fp8.values;
  const float* x_scales = p.x_fp8.scales;
  auto x_row_of = [&](int r) {  // the x row of tile row r, -1 past the tile's rows
    return r < tile.rows ? (p.x_row != nullptr ? p.x_row[tile.row0 + r] : tile.row0 + r) : -1;
  };
  int a_row[kCopiesPerThread];
#pragma unroll
  for (int i = 0; i < kCopiesPerThread; ++i) a_row[i] = x_row_of(t / 8 + 16 * i);
  const int scale_row = x_row_of(t);
  const int64_t matrix_values = tile.expert * p.w.values_per_matrix();
  const uint8_t* gate = static_cast<const uint8_t*>(p.w.values) + matrix_values;
  const uint8_t* up = kSwiglu ? static_cast<const uint8_t*>(p.up.values) + matrix_values : gate;
  const int64_t scale_at =
      tile.expert * p.w.scales_per_matrix() + (tile.n0 / kFp8Block) * fp8_weight_scale_ld(K);
  const float* w_scale = (kSwiglu && t == 1 ? p.up.scales : p.w.scales) + scale_at;

  for (int kb = 0; kb < kblocks; ++kb) {
    const int stage = kb % kStages;
    mbarrier_wait_or_trap(&s.empty[stage], ((kb / kStages) & 1) ^ 1);
    const int64_t k = static_cast<int64_t>(kb) * kTileK + chunk * 16;
    const bool k_ok = k < K;
    unsigned char* a = s.a(stage);
    unsigned char* b = s.b(stage);
#pragma unroll
    for (int i = 0; i < kCopiesPerThread; ++i) {
      const int r = t / 8 + 16 * i;
      const bool a_ok = a_row[i] >= 0 && k_ok;
      cp_async_16(a + swizzled_chunk_offset(r, chunk), a_ok ? x + a_row[i] * K + k : x, a_ok);
      const int64_t n = tile.n0 + (kSwiglu ? r % (kTileN / 2) : r);
      const uint8_t* matrix = kSwiglu && r >= kTileN / 2 ? up : gate;
      const bool b_ok = n < N && k_ok;
      cp_async_16(b + swizzled_chunk_offset(r, chunk), b_ok ? matrix + n * K + k : gate, b_ok);
    }
    float* scales = s.scales(stage);
    cp_async_4(scales + t, scale_row >= 0 ? x_scales + static_cast<int64_t>(kb) * p.x_rows + scale_row : x_scales,
               scale_row >= 0);
    if (t < 2) cp_async_4(scales + kTileM + t, w_scale + kb, true);
    // The stage's "full" completes once this thread arrived and its copies landed.
    cp_async_mbarrier_arrive(&s.full[stage]);
    mbarrier_arrive(&s.full[stage]);
  }
  cp_async_wait_all();  // no copy outlives its thread
}

// ---- consumers -------------------------------------------------------------------------------------------------
// Warpgroup `group` takes tile rows 64 group .. 64 group + 63: warp w's rows 16 w + g and 16 w + g + 8.
template <bool kSwiglu>
__device__ void consume(const DeepseekExpertParams& p, const Shared& s, const Tile& tile, int kblocks) {
  const int group = threadIdx.x / 128 - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;
  const int row = 64 * group + 16 * warp + g;  // tile row of fragment rows h = 0; h = 1 is row + 8
  float acc[kAccumulators], block[kAccumulators];
#pragma unroll
  for (int i = 0; i < kAccumulators; ++i) acc[i] = 0.0f;
  for (int kb = 0; kb < kblocks; ++kb) {
    const int stage = kb % kStages;
    mbarrier_wait_or_trap(&s.full[stage], (kb / kStages) & 1);
    fence_proxy_async_shared();  // the stage's generic-proxy writes (cp.async), now observed, before wgmma reads them
    const uint32_t a = shared_address(s.a(stage)) + 64 * group * kSwizzleRowBytes;
    const uint32_t b = shared_address(s.b(stage));
    wgmma_fence_registers(block);
    wgmma_fence();
#pragma unroll
    for (int slab = 0; slab < kTileK / 32; ++slab)
      wgmma_m64n128k32_e4m3_ss(block, sw128_descriptor(a + 32 * slab), sw128_descriptor(b + 32 * slab), slab > 0);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_registers(block);
    const float* scales = s.scales(stage);
    const float x_scale[2] = {scales[row], scales[row + 8]};
    const float w_scale[2] = {scales[kTileM], scales[kTileM + 1]};
    // Every consumer thread gives the stage back after its own scale reads (compute-sanitizer's racecheck flagged the
    // earlier __syncwarp + lane-0 arrive against the producer's next cp.async into the stage; 256 arrivals a stage).
    mbarrier_arrive(&s.empty[stage]);
#pragma unroll
    for (int j = 0; j < kTileN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float factor = x_scale[h] * w_scale[j < kTileN / 16 ? 0 : 1];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          const int at = 4 * j + 2 * h + i;
          acc[at] = fmaf(block[at], factor, acc[at]);
        }
      }
  }

  const int64_t N = p.w.rows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row + 8 * h;
    if (r >= tile.rows) continue;
    const int64_t out_row = static_cast<int64_t>(tile.row0 + r) * N;
#pragma unroll
    for (int j = 0; j < (kSwiglu ? kTileN / 16 : kTileN / 8); ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int64_t n = tile.n0 + 8 * j + 2 * c + i;
        if (n >= N) continue;
        const float v = acc[4 * j + 2 * h + i];
        if constexpr (kSwiglu) {
          const float u = acc[4 * (j + kTileN / 16) + 2 * h + i];
          static_cast<bf16*>(p.out)[out_row + n] = __float2bfloat16_rn(v / (1.0f + expf(-v)) * u);
        } else {
          static_cast<float*>(p.out)[out_row + n] = v;
        }
      }
  }
}

// Grid (weight tile, row tile).
template <bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1)
    deepseek_experts_wgmma_kernel(const __grid_constant__ DeepseekExpertParams p) {
  pdl_prologue();
  extern __shared__ unsigned char shared_bytes[];
  __shared__ Tile tile_of_cta;
  if (threadIdx.x < 32) find_row_tile(p.routing, static_cast<int>(blockIdx.y), tile_of_cta);
  Shared s;
  s.base = swizzle_aligned(shared_bytes);
  s.full = reinterpret_cast<uint64_t*>(s.base + kBarrierOffset);
  s.empty = s.full + kStages;
  init_stage_barriers(s.full, s.empty, kStages, kProducerThreads, 32 * kConsumerWarps);  // ends in __syncthreads
  Tile tile = tile_of_cta;
  if (tile.expert < 0) return;  // the whole CTA
  tile.n0 = static_cast<int64_t>(blockIdx.x) * (kSwiglu ? kTileN / 2 : kTileN);
  const int kblocks = static_cast<int>(fp8_blocks(p.w.cols));
  // No register reallocation: the consumers' two sets of 64 fp32 accumulators (the block's and the promoted sum)
  // fit the 168 registers a thread of 384 gets (ptxas -v: 153, no spills).
  if (threadIdx.x < kProducerThreads)
    produce<kSwiglu>(p, s, tile, kblocks);
  else
    consume<kSwiglu>(p, s, tile, kblocks);
}

template <bool kSwiglu>
void launch_typed(cudaStream_t stream, const DeepseekExpertParams& p) {
  constexpr auto kernel = deepseek_experts_wgmma_kernel<kSwiglu>;
  allow_dynamic_shared_memory<kernel>(kSharedBytes);
  const int row_tiles = moe_max_tiles(p.rows, kTileM, p.routing.num_experts);
  MOESERVE_CHECK(row_tiles <= 65535, "deepseek_experts_wgmma: {} rows make {} row tiles, over the grid's 65,535",
                 p.rows, row_tiles);
  const int64_t weight_rows = kSwiglu ? kTileN / 2 : kTileN;
  const dim3 grid(static_cast<unsigned>((p.w.rows + weight_rows - 1) / weight_rows), static_cast<unsigned>(row_tiles));
  MOESERVE_CUDA_CHECK(cuda_launch(kernel, grid, kThreads, kSharedBytes, stream, p));
}

}  // namespace

void launch_deepseek_experts_wgmma(cudaStream_t stream, const DeepseekExpertParams& p) {
  const bool swiglu = p.up.values != nullptr;
  MOESERVE_CHECK(p.w.type == WeightType::fp8_block && (!swiglu || p.up.type == WeightType::fp8_block),
                 "deepseek_experts_wgmma: the weights must be e4m3 with 128 x 128 block scales");
  MOESERVE_CHECK(p.routing.expert_offsets != nullptr && p.routing.num_experts == p.w.count,
                 "deepseek_experts_wgmma: needs the grouping of the rows by expert ({} matrices, {} experts)",
                 p.w.count, p.routing.num_experts);
  MOESERVE_CHECK(p.x_fp8.values != nullptr && p.x_fp8.scales != nullptr && p.x_rows > 0,
                 "deepseek_experts_wgmma: needs x_fp8 (act_quant's scratch) and x_rows (given {})", p.x_rows);
  MOESERVE_CHECK(p.w.cols % 16 == 0, "deepseek_experts_wgmma: K = {} must be a multiple of 16 (16-byte copies)",
                 p.w.cols);
  MOESERVE_CHECK(p.x_type == Precision::bf16 && (!swiglu || p.out_type == Precision::bf16),
                 "deepseek_experts_wgmma: takes bf16 inputs (the FP8 path's) and writes SwiGLU in bf16");
  if (p.rows == 0) return;
  launch_fp8_quantize_activations(stream, p.x_type, p.x, p.x_rows, p.w.cols, p.x_fp8);
  if (swiglu)
    launch_typed<true>(stream, p);
  else
    launch_typed<false>(stream, p);
}

}  // namespace moeserve::cuda
