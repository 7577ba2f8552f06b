// Expert projections at decode batch sizes (8-64 rows per expert) with each touched expert's weights read once and
// its tokens' activations shared by the whole CTA: mma.sync m16n8k16 with the MXFP4 weights as the A operand,
// dequantised in registers (moe_layout.h), the activations as the B operand from shared memory.
//
// Why (docs/PERF.md, moe_bench on an H200): the GEMV (moe_decode.cu) loads every token value of its tile from
// global memory in every warp, 2 bytes of activations per weight byte per 8-row n-tile, so at 8-24 rows per expert
// its warps mostly load activations (33-40% of the copy bandwidth); the wgmma decode kernel (moe_decode_wgmma.cu)
// reads each expert once but its tensor rate scales with its narrow N (121 TFLOP/s at n32). Here a CTA of 8 warps
// owns 256 weight rows (2 m16 slabs a warp: one slice of the tiled weights, moe_layout.h) of one expert for one tile
// of up to 8 kNTiles of its rows, and walks K in 128-k chunks through a 4-stage cp.async ring holding, per chunk, the
// CTA's raw MXFP4 blocks (16 KB, one contiguous run of the tiled weights), their scale bytes (a 32-bit word a row,
// 1 KB) and the tile's activations (256 bytes a row). Each warp converts its rows'
// blocks once per chunk and uses them for every n-tile, so a weight value costs its conversion once however many
// tokens the tile holds, and an activation value is read from shared memory once per warp (32 weight rows).
//
// Lane (g = lane / 4, c = lane % 4) of a warp holds, for m-slab s of the warp, MXFP4 block c of the chunk for weight
// rows a (fragment row g) and b (row g + 8); for the first projection a, b = 2j, 2j + 1 (a gate / up pair), so that
// SwiGLU is applied by the thread holding both. The k order inside the chunk is the GEMV's permutation (word q of
// block c feeds k steps 2q, 2q + 1), and the activations are read with the same one: lane (g, c) reads, for word q,
// the 16-byte piece 4c + q of token row g of the chunk. Pieces are stored at (4q + c) ^ (4 (row % 2)) so that the
// eight lanes of each quarter warp read eight different bank groups.
//
// FP8 activations (kFp8: --activation-dtype fp8, params.x_fp8): the activations come as e4m3 rows with a scale per
// row (activation_fp8.cu), the weights become e4m3 bytes by bit placement (moe_layout.h: e2m1 times 2^-6, exact)
// and the tensor cores run m16n8k32, one MXFP4 block per instruction, so that each product is scaled by its
// block's 2^(s - 121) in fp32 (one FMA per output value and block) and by the token's scale at the end. For that a
// k32 instruction must stay inside one block: lane (g, c) holds word c of block j (values 8c .. 8c + 7 as its
// fragment's k 4c .. 4c + 3 and 16 + 4c .. 16 + 4c + 3) for rows g and g + 8, and reads the same 8 activation bytes
// of its token as its B fragment. The weights' 16-byte blocks of row g are stored at slot j ^ (g / 2) and the
// activations' 16-byte pieces of token row r at p ^ (2 (r % 4)), which keeps the 32-bit and 64-bit shared loads
// free of bank conflicts. Counted per 8 weight values: 6 integer instructions and half an mma, against 9 integer
// instructions, 4 bf16 multiplies and an mma for bf16 activations; plus 4 FMAs and ~2.5 integer instructions of
// block scale per 32 values.
// Tried and removed (docs/PERF.md): shallower rings for more CTAs an SM (3 stages x 3 CTAs, 2 x 4 for the 8-row tiles,
// 3 x 3 for 16) ran 7-30% slower on an H100 where the runner uses these tiles, the extra warps issuing less, not more.
// CPU reference: cpu::expert_linear (+ cpu::swiglu); with FP8 on the activations quantised as the device does.
#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_layout.h"
#include "runner/cuda/moe_plan.h"
#include "runner/cuda/moe_wgmma.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kMSlabs = 2;                          // m16 slabs per warp
constexpr int kWeightRows = kWarps * kMSlabs * 16;  // 256 weight rows per CTA
constexpr int kStages = 4;
constexpr int kChunkBlocks = 4;  // MXFP4 blocks (32 k) per row per chunk: 128 k
static_assert(kWeightRows == kMoeDecodeMmaWeightRows);

template <int kNTiles, bool kFp8>
struct Layout {
  static constexpr int kTileRows = 8 * kNTiles;
  static constexpr int kWeightBytes = kWeightRows * kChunkBlocks * 16;  // 16 KB
  static constexpr int kScaleBytes = kWeightRows * 4;                   // the chunk's 4 scale bytes of each row
  static constexpr int kRowPieces = kFp8 ? 8 : 16;                      // 16-byte pieces of a token row per chunk
  static constexpr int kActivationBytes = kTileRows * kRowPieces * 16;
  static constexpr int kStageBytes = kWeightBytes + kScaleBytes + kActivationBytes;
  static constexpr int kSharedBytes = kStages * kStageBytes;
};

template <bool kSwiglu, int kNTiles, bool kFp8>
__global__ void __launch_bounds__(kThreads, kNTiles >= 8 ? 1 : 2) moe_decode_mma_kernel(MoeGemmParams p) {
  pdl_prologue();
  using L = Layout<kNTiles, kFp8>;
  constexpr int kRowPieces = L::kRowPieces;
  MoeTile t;
  if (!moe_tile(p.routing, blockIdx.y, t)) return;
  const int e = t.expert, row0 = t.row0, row_end = t.row_end;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
  const int64_t N = p.w.out_features, K = p.w.in_features;
  const int blocks_per_row = static_cast<int>(K / 32);
  const int chunks = (blocks_per_row + kChunkBlocks - 1) / kChunkBlocks;
  const int64_t expert_row = static_cast<int64_t>(e) * N;
  const int64_t slab0 = static_cast<int64_t>(blockIdx.x) * kWarps * kMSlabs;
  // The CTA's rows are slice blockIdx.x of the tiled weights: chunk c of a row is c chunk strides on.
  const int64_t expert_first = static_cast<int64_t>(e) * N * mxfp4_padded_blocks(blocks_per_row);
  const int64_t chunk_stride = mxfp4_tiled_row(slab0 * 16, N, blocks_per_row).chunk_stride;

  extern __shared__ __align__(128) uint8_t shared[];

  // ---- the copies one thread issues per chunk (all loop-invariant but the k offset) ----
  // Weights: kWeightRows x 4 pieces; piece i = threadIdx.x + kThreads * j is (warp w, slab m, which, g, block c)
  // in that order, so that a warp's 32 lanes read 512 contiguous shared bytes per (slab, which).
  constexpr int kWeightCopies = kWeightRows * kChunkBlocks / kThreads;  // 4
  const uint8_t* w_base = p.w.blocks + expert_first * 16;
  uint32_t w_offset[kWeightCopies];  // bytes from w_base (moe_decode_mma_grid bounds an expert's blocks below 2^31 bytes)
  uint32_t w_dst[kWeightCopies];     // bytes from the stage: piece i, or (FP8) block cc of its row at slot cc ^ (cg / 2)
  bool w_ok[kWeightCopies];
#pragma unroll
  for (int j = 0; j < kWeightCopies; ++j) {
    const int i = threadIdx.x + kThreads * j;
    const int cw = i / 128, cm = (i / 64) % 2, cwhich = (i / 32) % 2, cg = (i / 4) % 8, cc = i % 4;
    const int64_t row = moe_slab_row(slab0 + cw * kMSlabs + cm, cg, cwhich, kSwiglu);
    w_ok[j] = row < N;
    w_offset[j] = static_cast<uint32_t>((mxfp4_tiled_row(w_ok[j] ? row : 0, N, blocks_per_row).row_offset + cc) * 16);
    w_dst[j] = static_cast<uint32_t>((kFp8 ? i - cc + (cc ^ (cg / 2)) : i) * 16);
  }
  // Scales: per weight row the aligned 32-bit word of its chunk's 4 scale bytes, one thread per row (thread i: warp
  // i / 32, slab, which, g in the weights' order above without the block).
  const uint8_t* s_src = nullptr;
  bool s_ok = false;
  {
    const int i = threadIdx.x;
    const int cw = i / 32, cm = (i / 16) % 2, cwhich = (i / 8) % 2, cg = i % 8;
    const int64_t row = moe_slab_row(slab0 + cw * kMSlabs + cm, cg, cwhich, kSwiglu);
    s_ok = row < N;
    s_src = p.w.scales + expert_first + mxfp4_tiled_row(s_ok ? row : 0, N, blocks_per_row).row_offset;
  }
  // Activations: kTileRows x 16 pieces, piece i = threadIdx.x + kThreads * j is (token row i / 16, piece i % 16).
  constexpr int kActivationCopies = (L::kTileRows * kRowPieces + kThreads - 1) / kThreads;
  // bf16: piece i covers k 8i .. 8i + 7 of the chunk; FP8: k 16i .. 16i + 15.
  constexpr int kPieceElements = kFp8 ? 16 : 8;
  const uint8_t* x_src[kActivationCopies];
  bool x_ok[kActivationCopies];
  uint32_t x_dst[kActivationCopies];
#pragma unroll
  for (int j = 0; j < kActivationCopies; ++j) {
    const int i = threadIdx.x + kThreads * j;
    const int r = i / kRowPieces, piece = i % kRowPieces;
    const int grouped = row0 + r;
    x_ok[j] = i < L::kTileRows * kRowPieces && grouped < row_end;
    const int x_row = x_ok[j] ? (p.x_row != nullptr ? p.x_row[grouped] : grouped) : 0;
    const int64_t element = static_cast<int64_t>(x_row) * K + piece * kPieceElements;
    if constexpr (kFp8) {
      x_src[j] = p.x_fp8 + element;
      // Piece 2j + h (bytes of block j, half h) of row r at (2j + h) ^ (2 (r % 4)).
      x_dst[j] = static_cast<uint32_t>(L::kWeightBytes + L::kScaleBytes + (r * kRowPieces + (piece ^ (2 * (r % 4)))) * 16);
    } else {
      x_src[j] = reinterpret_cast<const uint8_t*>(static_cast<const bf16*>(p.x) + element);
      // Piece 4c + q of a row is read by lane c for word q: stored at (4q + c) ^ (4 (r % 2)).
      const int stored = (4 * (piece % 4) + piece / 4) ^ (4 * (r % 2));
      x_dst[j] = static_cast<uint32_t>(L::kWeightBytes + L::kScaleBytes + (r * kRowPieces + stored) * 16);
    }
  }

  auto copy_chunk = [&](int chunk) {
    uint8_t* stage = shared + (chunk % kStages) * L::kStageBytes;
    const int kb = chunk * kChunkBlocks;
    const uint32_t chunk_offset = static_cast<uint32_t>(chunk * chunk_stride);
#pragma unroll
    for (int j = 0; j < kWeightCopies; ++j) {
      const int i = threadIdx.x + kThreads * j;
      const bool ok = w_ok[j] && kb + (i % 4) < blocks_per_row;
      cp_async_16(stage + w_dst[j], w_base + w_offset[j] + chunk_offset * 16u, ok);
    }
    cp_async_4(stage + L::kWeightBytes + threadIdx.x * 4, s_src + chunk_offset, s_ok);
#pragma unroll
    for (int j = 0; j < kActivationCopies; ++j) {
      const int i = threadIdx.x + kThreads * j;
      if (kActivationCopies * kThreads > L::kTileRows * kRowPieces && i >= L::kTileRows * kRowPieces) continue;
      const bool ok = x_ok[j] && kb * 32 + (i % kRowPieces) * kPieceElements < K;
      cp_async_16(stage + x_dst[j], x_src[j] + static_cast<int64_t>(kb) * 32 * (kFp8 ? 1 : 2), ok);
    }
  };

  float acc[kMSlabs][kNTiles][4] = {};

  const Mxfp4Bf16Constants constants = kFp8 ? Mxfp4Bf16Constants{} : mxfp4_bf16_constants();  // in registers (moe_layout.h)
  auto compute_bf16 = [&](int chunk) {
    const uint8_t* stage = shared + (chunk % kStages) * L::kStageBytes;
    const uint8_t* weights = stage + warp * (kMSlabs * 2 * 32 * 16);
    const uint8_t* scales = stage + L::kWeightBytes + warp * (kMSlabs * 2 * 8 * 4);
    const uint8_t* acts = stage + L::kWeightBytes + L::kScaleBytes;
    uint4 w[kMSlabs][2];
    uint32_t factor[kMSlabs][2];
#pragma unroll
    for (int m = 0; m < kMSlabs; ++m)
#pragma unroll
      for (int which = 0; which < 2; ++which) {
        w[m][which] = *reinterpret_cast<const uint4*>(weights + ((m * 2 + which) * 32 + lane) * 16);
        factor[m][which] = mxfp4_scale_bf16x2(scales[((m * 2 + which) * 8 + g) * 4 + c]);
      }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      // A fragments of k steps 2q, 2q + 1 for both slabs.
      uint32_t a[kMSlabs][2][4];
#pragma unroll
      for (int m = 0; m < kMSlabs; ++m) {
        uint32_t v_a[4], v_b[4];
        mxfp4_word_to_bf16(word_of(w[m][0], q), factor[m][0], constants, v_a);
        mxfp4_word_to_bf16(word_of(w[m][1], q), factor[m][1], constants, v_b);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          a[m][h][0] = v_a[2 * h];
          a[m][h][1] = v_b[2 * h];
          a[m][h][2] = v_a[2 * h + 1];
          a[m][h][3] = v_b[2 * h + 1];
        }
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int r = nt * 8 + g;
        const uint4 b = *reinterpret_cast<const uint4*>(acts + (r * kRowPieces + ((4 * q + c) ^ (4 * (r % 2)))) * 16);
#pragma unroll
        for (int m = 0; m < kMSlabs; ++m) {
          mma_bf16_16816(acc[m][nt], a[m][0], b.x, b.y);
          mma_bf16_16816(acc[m][nt], a[m][1], b.z, b.w);
        }
      }
    }
  };

  auto compute_fp8 = [&](int chunk) {
    const uint8_t* stage = shared + (chunk % kStages) * L::kStageBytes;
    const uint8_t* weights = stage + warp * (kMSlabs * 2 * 32 * 16);
    const uint8_t* scales = stage + L::kWeightBytes + warp * (kMSlabs * 2 * 8 * 4);
    const uint8_t* acts = stage + L::kWeightBytes + L::kScaleBytes;
    // The chunk's 4 scale bytes of each of this lane's rows (+ 6 each), from the row's word.
    uint32_t row_scales[kMSlabs][2];
#pragma unroll
    for (int m = 0; m < kMSlabs; ++m)
#pragma unroll
      for (int which = 0; which < 2; ++which) {
        row_scales[m][which] =
            *reinterpret_cast<const uint32_t*>(scales + ((m * 2 + which) * 8 + g) * 4) + kMxfp4E4m3ScaleBias;
      }
#pragma unroll
    for (int j = 0; j < kChunkBlocks; ++j) {
      uint32_t a[kMSlabs][4];
      float factor[kMSlabs][2];
#pragma unroll
      for (int m = 0; m < kMSlabs; ++m) {
        const uint32_t slot = (j ^ (g / 2)) * 16 + 4 * c;
        const uint32_t word_a = *reinterpret_cast<const uint32_t*>(weights + ((m * 2) * 32 + g * 4) * 16 + slot);
        const uint32_t word_b = *reinterpret_cast<const uint32_t*>(weights + ((m * 2 + 1) * 32 + g * 4) * 16 + slot);
        a[m][0] = mxfp4_packed_low_e4m3(word_a);
        a[m][1] = mxfp4_packed_low_e4m3(word_b);
        a[m][2] = mxfp4_packed_high_e4m3(word_a);
        a[m][3] = mxfp4_packed_high_e4m3(word_b);
        factor[m][0] = __uint_as_float(mxfp4_scale_e4m3_factor_bits(row_scales[m][0], j));
        factor[m][1] = __uint_as_float(mxfp4_scale_e4m3_factor_bits(row_scales[m][1], j));
      }
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int r = nt * 8 + g;
        const uint2 b = *reinterpret_cast<const uint2*>(acts + (r * kRowPieces + ((2 * j + c / 2) ^ (2 * (r % 4)))) * 16 +
                                                        (c % 2) * 8);
#pragma unroll
        for (int m = 0; m < kMSlabs; ++m) {
          float d[4];
          mma_e4m3_16832(d, a[m], b.x, b.y);
          acc[m][nt][0] = fmaf(factor[m][0], d[0], acc[m][nt][0]);
          acc[m][nt][1] = fmaf(factor[m][0], d[1], acc[m][nt][1]);
          acc[m][nt][2] = fmaf(factor[m][1], d[2], acc[m][nt][2]);
          acc[m][nt][3] = fmaf(factor[m][1], d[3], acc[m][nt][3]);
        }
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < chunks) copy_chunk(s);
    cp_async_commit();
  }
  for (int chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait_pending<kStages - 2>();
    __syncthreads();  // every thread's copies of `chunk` landed; every warp is done with chunk - 1's stage
    if (chunk + kStages - 1 < chunks) copy_chunk(chunk + kStages - 1);
    cp_async_commit();
    if constexpr (kFp8)
      compute_fp8(chunk);
    else
      compute_bf16(chunk);
  }

  // acc[m][nt] = (row a, token 2c), (row a, token 2c + 1), (row b, token 2c), (row b, token 2c + 1).
  const float* bias = p.w.bias + expert_row;
#pragma unroll
  for (int m = 0; m < kMSlabs; ++m) {
    const int64_t row_a = moe_slab_row(slab0 + warp * kMSlabs + m, g, 0, kSwiglu);
    const int64_t row_b = moe_slab_row(slab0 + warp * kMSlabs + m, g, 1, kSwiglu);
    const bool ok_a = row_a < N, ok_b = row_b < N;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt)
#pragma unroll
      for (int t = 0; t < 2; ++t) {
        const int r = row0 + nt * 8 + 2 * c + t;
        if (r >= row_end) continue;
        // FP8: the token's activation scale (its x row's).
        const float token_scale = kFp8 ? p.x_scale[p.x_row != nullptr ? p.x_row[r] : r] : 1.0f;
        const float va = acc[m][nt][t] * token_scale, vb = acc[m][nt][2 + t] * token_scale;
        if constexpr (kSwiglu) {
          if (ok_b)
            static_cast<bf16*>(p.out)[static_cast<int64_t>(r) * (N / 2) + row_a / 2] =
                __float2bfloat16_rn(swiglu(va + bias[row_a], vb + bias[row_b], p.swiglu_alpha, p.swiglu_limit));
        } else if (p.out_bf16) {
          bf16* y = static_cast<bf16*>(p.out) + static_cast<int64_t>(r) * N;
          if (ok_a) y[row_a] = __float2bfloat16_rn(va + bias[row_a]);
          if (ok_b) y[row_b] = __float2bfloat16_rn(vb + bias[row_b]);
        } else {
          float* y = static_cast<float*>(p.out) + static_cast<int64_t>(r) * N;
          if (ok_a) y[row_a] = va + bias[row_a];
          if (ok_b) y[row_b] = vb + bias[row_b];
        }
      }
  }
}

// max_tiles: the grid's tile count (-1: the grouping's bound for tiles of this kernel's rows).
template <bool kSwiglu, int kNTiles, bool kFp8>
void launch_kernel(cudaStream_t stream, const MoeGemmParams& p, int max_tiles) {
  constexpr int bytes = Layout<kNTiles, kFp8>::kSharedBytes;
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(moe_decode_mma_kernel<kSwiglu, kNTiles, kFp8>), bytes);
  // x: the CTA's 256-row weight slices; y: the grouping's tiles (those past the step's count return at once).
  MoeGrid grid = moe_decode_mma_grid(p.rows, 8 * kNTiles, p.w.out_features, p.w.in_features, p.routing.num_experts);
  if (max_tiles >= 0) grid.blocks = max_tiles;
  if (grid.blocks == 0) return;
  MOESERVE_CUDA_CHECK(cuda_launch(moe_decode_mma_kernel<kSwiglu, kNTiles, kFp8>, dim3(grid.weight_tiles, grid.blocks),
                                  kThreads, bytes, stream, p));
}

template <int kNTiles>
void launch_tiles(cudaStream_t stream, const MoeGemmParams& p, int max_tiles = -1) {
  const bool fp8 = p.x_fp8 != nullptr;
  if (p.swiglu && fp8)
    launch_kernel<true, kNTiles, true>(stream, p, max_tiles);
  else if (p.swiglu)
    launch_kernel<true, kNTiles, false>(stream, p, max_tiles);
  else if (fp8)
    launch_kernel<false, kNTiles, true>(stream, p, max_tiles);
  else
    launch_kernel<false, kNTiles, false>(stream, p, max_tiles);
}

// decode_mma_mixed: the grouping's 32-, 16- and 8-row classes, each by the kernel of its width (widest first), so
// that every tile runs exactly the fixed-width kernel with its own shared memory size.
void launch_mixed(cudaStream_t stream, const MoeGemmParams& p) {
  static_assert(moe_mixed_class_rows(0) == 32 && moe_mixed_class_rows(1) == 16 && moe_mixed_class_rows(2) == 8);
  for (int cls = 0; cls < 3; ++cls) {
    MoeGemmParams q = p;
    q.routing.tile_class = cls;
    const int max_tiles = moe_mixed_class_max_tiles(p.rows, cls, p.routing.mixed, p.routing.num_experts);
    if (cls == 0) launch_tiles<4>(stream, q, max_tiles);
    if (cls == 1) launch_tiles<2>(stream, q, max_tiles);
    if (cls == 2) launch_tiles<1>(stream, q, max_tiles);
  }
}

// max_tiles: the grid's tile bound, or -1 for the grouping's bound for tiles of tile_rows.
void launch_bounded(cudaStream_t stream, const MoeGemmParams& params, int tile_rows, int max_tiles) {
  check_moe_gemm_shape("moe_decode_mma", params.rows, params.w.out_features, params.w.in_features,
                       params.routing.num_experts);
  if (params.rows == 0) return;
  switch (tile_rows) {
    case kMoeMixedTileRows: return launch_mixed(stream, params);
    case 8: return launch_tiles<1>(stream, params, max_tiles);
    case 16: return launch_tiles<2>(stream, params, max_tiles);
    case 32: return launch_tiles<4>(stream, params, max_tiles);
    case 64: return launch_tiles<8>(stream, params, max_tiles);
    default: fail_cuda("moe_decode_mma", "tile_rows must be 8, 16, 32, 64 or mixed", __FILE__, __LINE__);
  }
}

}  // namespace

void launch_moe_decode_mma(cudaStream_t stream, const MoeGemmParams& params, int tile_rows) {
  launch_bounded(stream, params, tile_rows, -1);
}

void launch_moe_decode_mma_tiles(cudaStream_t stream, const MoeGemmParams& params, int tile_rows, int max_tiles) {
  if (max_tiles < 0 || tile_rows == kMoeMixedTileRows)
    fail_cuda("moe_decode_mma", "a tile bound needs one width (8, 16, 32 or 64) and max_tiles >= 0", __FILE__,
              __LINE__);
  launch_bounded(stream, params, tile_rows, max_tiles);
}

}  // namespace moeserve::cuda
