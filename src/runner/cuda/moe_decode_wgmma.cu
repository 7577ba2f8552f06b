// Expert projections in the decode regime at large batch (8-64 grouped rows per expert: decode at batch 256-2,048
// with top-4 of 128 experts), where reading each touched expert's MXFP4 weights once per step near the copy
// bandwidth is the whole game. A persistent, warp-specialised kernel over items of (up to 64 grouped rows of one
// expert: the tile list's tiles) x (512 weight rows), weight slices of one expert adjacent in item order so its
// row tiles share them through L2.
//   The weights are wgmma's A operand, dequantised straight into registers (m64 blocks: four per consumer
//   warpgroup); the tokens are the B operand from shared memory, N = 16, 32 or 64 rows per tile (one kernel
//   each: ptxas serialises the wgmmas of a kernel that mixes shapes), chosen per step by the mean rows per expert
//   (moe_plan.h). The GEMV (moe_decode.cu) read each expert once per 8- or 16-row tile instead.
//   The same kernel with N = 128 and 256-row slices (two m64 blocks per consumer warpgroup) serves prefill-sized
//   steps (path wgmma_rs_n128): there a weight value's conversion serves 128 tokens, where the grouped GEMM
//   (moe_prefill_wgmma.cu) dequantises every value into shared memory in its producers for each 128-row tile, and
//   that bounded it (docs/PERF.md).
//   Producer warpgroup, per 128-k step into a ring of 4 (n64) or 5 stages: cp.async of the raw MXFP4 blocks, 64
//   contiguous bytes of each weight row (a DRAM burst's worth, not the 32 a 64-k step would read 1,440 bytes
//   apart), of the activations pair by pair (4 bytes) into the k order the register fragments imply
//   (moe_layout.h; the rows' offsets from a per-item table in shared memory), scale bytes through registers;
//   stages - 2 steps of copies in flight (~100 KB); once a step has landed, arrive "full" (the consumers fence
//   the async proxy after their wait, as in moe_prefill_wgmma.cu).
//   Two consumer warpgroups: per k16 slab, wait for the previous slab's wgmmas, dequantise the blocks' fragments
//   (one 32-bit word of an MXFP4 block per thread and row: 8 values), then issue the slab's wgmmas, so that one
//   warpgroup converts while the other's wgmmas run. (Converting slab k16 while k16 - 1's wgmmas were still in
//   flight, into a second register set, made ptxas serialise every wgmma of the kernel: its warning C7513,
//   "non wgmma instructions defining input registers of a wgmma between start and end of the pipeline stage".)
//   The stage
//   goes back on "empty" (every consumer thread arrives) when the last wgmma reading it completed. Epilogue:
//   bias, SwiGLU (gate and up rows are one thread's fragment rows g and g + 8), bf16 or fp32 out.
// CPU reference: cpu::expert_linear (+ cpu::swiglu).
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_layout.h"
#include "runner/cuda/moe_plan.h"
#include "runner/cuda/moe_wgmma.cuh"

namespace moeserve::cuda {
namespace {

// Weight rows of an item, and m64 blocks per consumer warpgroup: 512 and 4 for N <= 64, 256 and 2 for N = 128 (the
// accumulators: kBlocks x kN / 2 registers a thread, 128 either way).
template <int kN>
constexpr int kWeightRows = moe_decode_wgmma_weight_rows(kN);
template <int kN>
constexpr int kBlocksPerGroup = kWeightRows<kN> / 2 / 64;
static_assert(kWeightRows<64> % 128 == 0 && kWeightRows<128> % 128 == 0);
constexpr int kTileK = 128;               // four MXFP4 blocks: 64 contiguous bytes of each weight row a step
constexpr int kStepBlocks = kTileK / 32;
constexpr int kProducerThreads = 128, kConsumerWarps = 8, kThreads = kProducerThreads + 32 * kConsumerWarps;
constexpr int kProducerRegisters = 72, kConsumerRegisters = 216;
static_assert(kProducerRegisters + 2 * kConsumerRegisters <= 504);

// Shared memory, per stage: the activation tile (two swizzled bf16 sub-tiles [row][64 k], moe_layout.h), raw blocks
// [block][position][16 bytes], scale bytes [position][block]; then the per-item table of activation row offsets
// and the barriers. Stages: as many as fit (~200 KB); copies run kStages - 2 steps ahead.
template <int kN>
struct Layout {
  static constexpr int kStages = kN >= 64 ? 4 : 5;
  static constexpr int kLookahead = kStages - 2;
  static constexpr int kHalfBytes = kN * kSwizzleRowBytes;
  static constexpr int kXBytes = 2 * kHalfBytes;
  static constexpr int kRawBytes = kWeightRows<kN> * kStepBlocks * 16;
  static constexpr int kScaleBytes = kWeightRows<kN> * kStepBlocks;
  static constexpr int kRawOffset = kStages * kXBytes;
  static constexpr int kScaleOffset = kRawOffset + kStages * kRawBytes;
  static constexpr int kRowOffset = kScaleOffset + kStages * kScaleBytes;
  static constexpr int kBarrierOffset = kRowOffset + kN * 8;
  static constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + kSwizzleAtomBytes;
  static_assert(kHalfBytes % kSwizzleAtomBytes == 0 && kRowOffset % 8 == 0 && kSharedBytes <= 227 * 1024);
};

using Item = MoeItem;
template <int kN>
__device__ Item item_at(const MoeGemmParams& p, int item, int n_blocks) {
  return moe_item_at(p, item, n_blocks, kN, kWeightRows<kN>);
}

// The slice's weight row at A position `position` (0..511, or 0..255 for N = 128): consumer warpgroup
// position / (kWeightRows / 2), m64 block (position / 64) % kBlocksPerGroup, fragment row position % 64.
__device__ int64_t position_row(int position, bool swiglu) {
  return (position & ~63) + block_weight_row(position & 63, swiglu);
}

template <int kN>
struct Shared {
  using L = Layout<kN>;
  unsigned char* base;
  uint64_t* full;
  uint64_t* empty;
  __device__ unsigned char* x(int stage) const { return base + stage * L::kXBytes; }
  __device__ unsigned char* raw(int stage) const { return base + L::kRawOffset + stage * L::kRawBytes; }
  __device__ unsigned char* scales(int stage) const { return base + L::kScaleOffset + stage * L::kScaleBytes; }
  __device__ int64_t* row_offsets() const { return reinterpret_cast<int64_t*>(base + L::kRowOffset); }
};

// ---- producer ---------------------------------------------------------------------------------------------------------
// Thread t copies block t % 4 of positions t / 4 + 32 i (so a warp's 16-byte copies cover 8 rows x 64 contiguous
// bytes), the scale bytes of positions t + 128 j, and pair t % 64 (block (t % 64) / 16, pair t % 16) of activation
// rows t / 64 + 2 i. Position t / 4 + 32 i holds weight row position_row(t / 4 + 32 (i % 2)) + 64 (i / 2).
template <bool kSwiglu, int kN>
struct Producer {
  using L = Layout<kN>;
  static constexpr int kCopiesPerThread = kWeightRows<kN> * kStepBlocks / kProducerThreads;
  static constexpr int kScalesPerThread = kWeightRows<kN> / kProducerThreads;
  const MoeGemmParams& p;
  Shared<kN> s;
  int n_blocks, ksteps, blocks_per_row;
  int t;
  int64_t copy_row[2] = {}, scale_row = 0;  // weight rows of positions t / 4 (+ 32), and of t, in the item
  int expert = 0;
  uint32_t pending[kScalesPerThread];  // scale bytes of positions t + 128 j (block b in byte b), for pending_step
  int pending_step = -1;

  // Index of block `block` of this step in weight row `row` (tiled: moe_layout.h), or -1 past the weight rows or
  // past K.
  __device__ int64_t block_index(int64_t row, int step, int block) const {
    const int kb = kStepBlocks * step + block;
    return row < p.w.out_features && kb < blocks_per_row
               ? expert * p.w.out_features * mxfp4_padded_blocks(blocks_per_row) +
                     mxfp4_tiled_index(row, kb, p.w.out_features, blocks_per_row)
               : -1;
  }

  // The item's activation row offsets go to the shared table once every producer thread is done with the last
  // item's (named barrier 1: the producer warpgroup only).
  __device__ void start_item(int local) {
    const Item it = item_at<kN>(p, blockIdx.x + local * gridDim.x, n_blocks);
    sm90::named_barrier_sync(1, kProducerThreads);
    if (t < kN)
      s.row_offsets()[t] =
          t < it.rows ? static_cast<int64_t>(p.x_row != nullptr ? p.x_row[it.row0 + t] : it.row0 + t) * p.w.in_features
                      : -1;
    sm90::named_barrier_sync(1, kProducerThreads);
    expert = it.expert;
    copy_row[0] = it.n0 + position_row(t / 4, kSwiglu);
    copy_row[1] = it.n0 + position_row(t / 4 + 32, kSwiglu);
    scale_row = it.n0 + position_row(t, kSwiglu);
  }

  __device__ void store_pending() {
    uint32_t* scales = reinterpret_cast<uint32_t*>(s.scales(pending_step % L::kStages));
#pragma unroll
    for (int j = 0; j < kScalesPerThread; ++j) scales[t + kProducerThreads * j] = pending[j];
  }

  __device__ void copy_step(int g) {
    const int step = g % ksteps, stage = g % L::kStages;
    if (step == 0) start_item(g / ksteps);
    mbarrier_wait_or_trap(&s.empty[stage], ((g / L::kStages) & 1) ^ 1);
    unsigned char* raw = s.raw(stage);
    const int block = t % 4;
#pragma unroll
    for (int i = 0; i < kCopiesPerThread; ++i) {
      const int64_t index = block_index(copy_row[i % 2] + 64 * (i / 2), step, block);
      cp_async_16(raw + (block * kWeightRows<kN> + t / 4 + 32 * i) * 16, p.w.blocks + (index >= 0 ? index * 16 : 0),
                  index >= 0);
    }
    const bf16* x = static_cast<const bf16*>(p.x);
    const int64_t* offsets = s.row_offsets();
    unsigned char* tile = s.x(stage);
    const int x_block = (t % 64) / 16, pair = t % 16;
    const int64_t k = static_cast<int64_t>(step) * kTileK + x_block * 32 + 2 * pair;
#pragma unroll 4  // not all kN / 2: each copy's row offset would hold two registers across the loop
    for (int i = 0; i < kN / 2; ++i) {
      const int r = t / 64 + 2 * i;
      const int64_t offset = offsets[r];
      const bool ok = offset >= 0 && k < p.w.in_features;
      cp_async_4(tile + activation_pair_offset(kN, r, x_block, pair), ok ? x + offset + k : x, ok);
    }
    // The previous step's scale bytes have had a step's time to arrive; this step's go to registers.
    if (pending_step >= 0) store_pending();
#pragma unroll
    for (int j = 0; j < kScalesPerThread; ++j) {
      uint32_t bytes = 0;
#pragma unroll
      for (int b = 0; b < kStepBlocks; ++b) {
        const int64_t index = block_index(scale_row + kProducerThreads * j, step, b);
        bytes |= (index >= 0 ? static_cast<uint32_t>(__ldg(p.w.scales + index)) : 0u) << (8 * b);
      }
      pending[j] = bytes;
    }
    pending_step = g;
  }

  __device__ void run(int total) {
#pragma unroll 1
    for (int g = 0; g < L::kLookahead; ++g) {
      if (g < total) copy_step(g);
      cp_async_commit();
    }
    // Step g goes to the consumers as soon as it landed, before step g + kLookahead waits for its stage.
    for (int g = 0; g < total; ++g) {
      if (pending_step == g) store_pending();  // the last steps: no copy_step after them stored their scales
      cp_async_wait_pending<L::kLookahead - 1>();
      mbarrier_arrive(&s.full[g % L::kStages]);
      if (g + L::kLookahead < total) copy_step(g + L::kLookahead);
      cp_async_commit();
    }
  }
};

// ---- consumers --------------------------------------------------------------------------------------------------------
// Thread (warp w, lane g * 4 + c) of consumer warpgroup `group`: in m64 block j, A positions
// group * kWeightRows / 2 + 64 j + 16 w + g (+ 8).
template <int kN>
struct Fragments {
  int group, warp, lane;
  __device__ int position(int block, int half) const {
    return group * (kWeightRows<kN> / 2) + 64 * block + 16 * warp + lane / 4 + 8 * half;
  }
};

template <bool kSwiglu, int kN>
__device__ void store_item(const MoeGemmParams& p, const Item& it, const Fragments<kN>& f,
                           const float (&acc)[kBlocksPerGroup<kN>][kN / 2]) {
  const int64_t N = p.w.out_features;
  const float* bias = p.w.bias + it.expert * N;
  const int c = f.lane % 4;
#pragma unroll
  for (int j = 0; j < kBlocksPerGroup<kN>; ++j) {
    const int64_t row_a = it.n0 + position_row(f.position(j, 0), kSwiglu);
    const int64_t row_b = it.n0 + position_row(f.position(j, 1), kSwiglu);
    const float bias_a = row_a < N ? bias[row_a] : 0.0f, bias_b = row_b < N ? bias[row_b] : 0.0f;
#pragma unroll
    for (int n8 = 0; n8 < kN / 8; ++n8)
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = 8 * n8 + 2 * c + i;
        if (r >= it.rows) continue;
        const int64_t row = it.row0 + r;
        const float a = acc[j][4 * n8 + i] + bias_a, b = acc[j][4 * n8 + 2 + i] + bias_b;
        if constexpr (kSwiglu) {
          if (row_b < N)
            static_cast<bf16*>(p.out)[row * (N / 2) + row_a / 2] =
                __float2bfloat16_rn(swiglu(a, b, p.swiglu_alpha, p.swiglu_limit));
        } else {
          float* y = static_cast<float*>(p.out) + row * N;
          if (row_a < N) y[row_a] = a;
          if (row_b < N) y[row_b] = b;
        }
      }
  }
}

// One item's k loop and epilogue; returns the next global step.
template <bool kSwiglu, int kN>
__device__ int consume_item(const MoeGemmParams& p, const Shared<kN>& s, const Item& it, const Fragments<kN>& f,
                            int g, int ksteps) {
  using L = Layout<kN>;
  constexpr int kBlocks = kBlocksPerGroup<kN>;
  const uint32_t base = shared_address(s.base);
  const int c = f.lane % 4;
  float acc[kBlocks][kN / 2];
  uint32_t frag[2][kBlocks][4];  // slab k16's A fragments in frag[k16 % 2]
  const Mxfp4Bf16Constants constants = mxfp4_bf16_constants();  // in registers (moe_layout.h)
  for (int step = 0; step < ksteps; ++step, ++g) {
    const int stage = g % L::kStages;
    mbarrier_wait(&s.full[stage], (g / L::kStages) & 1);  // no watchdog here: moe_wgmma.cuh says why
    fence_proxy_async_shared();  // the activation tile (cp.async, generic proxy) before wgmma reads it
    const unsigned char* raw = s.raw(stage);
    const uint8_t* scales = s.scales(stage);
#pragma unroll
    for (int block = 0; block < kStepBlocks; ++block) {
      uint32_t words[kBlocks][2], factors[kBlocks][2];
#pragma unroll
      for (int j = 0; j < kBlocks; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          words[j][h] =
              *reinterpret_cast<const uint32_t*>(raw + (block * kWeightRows<kN> + f.position(j, h)) * 16 + 4 * c);
          factors[j][h] = mxfp4_scale_bf16x2(scales[kStepBlocks * f.position(j, h) + block]);
        }
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int k16 = 2 * block + half;
        uint32_t(&a)[kBlocks][4] = frag[half];
        wgmma_wait<0>();  // slab k16 - 1 is done (wait<1> here is what made ptxas serialise the wgmmas)
        wgmma_fence_registers(acc);
        // Every consumer thread arrives: each read the previous stage's raw blocks and scales itself (ld.shared),
        // and its own release orders those reads before the producer's next copies into the stage (with lane 0
        // alone arriving, racecheck reported the other lanes' reads against those copies).
        if (k16 == 0 && step > 0) mbarrier_arrive(&s.empty[(g - 1) % L::kStages]);
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
          mxfp4_word_half_to_bf16(words[j][0], factors[j][0], half, constants, a[j][0], a[j][2]);
          mxfp4_word_half_to_bf16(words[j][1], factors[j][1], half, constants, a[j][1], a[j][3]);
        }
        wgmma_fence();
        const uint64_t b =
            sw128_descriptor(base + stage * L::kXBytes + (k16 / 4) * L::kHalfBytes + 32 * (k16 % 4));
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) wgmma_m64k16_rs<kN>(acc[j], a[j], b, step > 0 || k16 > 0);
        wgmma_commit();
      }
    }
  }
  wgmma_wait<0>();
  wgmma_fence_registers(acc);
  mbarrier_arrive(&s.empty[(g - 1) % L::kStages]);
  store_item<kSwiglu, kN>(p, it, f, acc);
  return g;
}

template <bool kSwiglu, int kN>
__global__ void __launch_bounds__(kThreads, 1) moe_decode_wgmma_kernel(const __grid_constant__ MoeGemmParams p,
                                                                        int n_blocks) {
  pdl_prologue();
  using L = Layout<kN>;
  extern __shared__ unsigned char shared_bytes[];
  Shared<kN> s;
  s.base = swizzle_aligned(shared_bytes);
  s.full = reinterpret_cast<uint64_t*>(s.base + L::kBarrierOffset);
  s.empty = s.full + L::kStages;
  init_stage_barriers(s.full, s.empty, L::kStages, kProducerThreads, 32 * kConsumerWarps);  // consumer threads
  const int items = moe_class_tile_count(p.routing) * n_blocks;
  const int ksteps = static_cast<int>((p.w.in_features + kTileK - 1) / kTileK);
  if (threadIdx.x < kProducerThreads) {
    warpgroup_registers_release<kProducerRegisters>();
    Producer<kSwiglu, kN> producer{p, s, n_blocks, ksteps, static_cast<int>(p.w.in_features / 32),
                                   static_cast<int>(threadIdx.x)};
    producer.run(cta_item_count(items) * ksteps);
  } else {
    warpgroup_registers_claim<kConsumerRegisters>();
    const Fragments<kN> f{static_cast<int>(threadIdx.x) / 128 - 1, (static_cast<int>(threadIdx.x) / 32) % 4,
                      static_cast<int>(threadIdx.x) % 32};
    for (int item = blockIdx.x, g = 0; item < items; item += gridDim.x)
      g = consume_item<kSwiglu, kN>(p, s, item_at<kN>(p, item, n_blocks), f, g, ksteps);
  }
}

template <bool kSwiglu, int kN>
void launch_typed(cudaStream_t stream, const MoeGemmParams& p) {
  constexpr int kSharedBytes = Layout<kN>::kSharedBytes;
  allow_dynamic_shared_memory<moe_decode_wgmma_kernel<kSwiglu, kN>>(kSharedBytes);
  const MoeGrid grid = moe_decode_wgmma_grid(p.rows, kN, p.w.out_features, p.w.in_features, p.routing.num_experts,
                                             device_multiprocessors());
  MOESERVE_CUDA_CHECK(cuda_launch(moe_decode_wgmma_kernel<kSwiglu, kN>, grid.blocks, kThreads, kSharedBytes, stream, p,
                                  grid.weight_tiles));
}

}  // namespace

void launch_moe_decode_wgmma(cudaStream_t stream, const MoeGemmParams& params, int tile_rows) {
  if (tile_rows != 16 && tile_rows != 32 && tile_rows != 64 && tile_rows != 128)
    fail_cuda("moe_decode_wgmma", "tile_rows must be 16, 32, 64 or 128", __FILE__, __LINE__);
  launch_checked("moe_decode_wgmma", params, [&](auto swiglu) {
    constexpr bool kSwiglu = decltype(swiglu)::value;
    if (tile_rows == 16) launch_typed<kSwiglu, 16>(stream, params);
    if (tile_rows == 32) launch_typed<kSwiglu, 32>(stream, params);
    if (tile_rows == 64) launch_typed<kSwiglu, 64>(stream, params);
    if (tile_rows == 128) launch_typed<kSwiglu, 128>(stream, params);
  });
}

}  // namespace moeserve::cuda
