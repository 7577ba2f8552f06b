// Expert projections for large batches (prefill) on Hopper's wgmma: a persistent, warp-specialised grouped GEMM
// over items of (128 grouped rows of one expert, from the device-built tile list) x (192 weight rows).
//   Producer warpgroup, per 64-k step: cp.async of the item's activation rows (gathered through row_token for the
//   first projection) into a 128-byte-swizzled bf16 tile (stage ring of 4), and of the raw MXFP4 blocks into a
//   staging ring of 3; once a step's copies have landed it dequantises its blocks (two prmt look-ups and a bf16
//   multiply per four values, moe_layout.h) into the swizzled bf16 B tile of the stage and arrives on the stage's
//   "full" barrier. Copies run two steps ahead of the step converted, across item ends, and a converted step is
//   handed over before the producer waits for a stage to copy into.
//   Two consumer warpgroups (64 rows each): wait "full", fence the async proxy, wgmma m64n192k16 over both shared
//   tiles into fp32 accumulators, give the stage back on its "empty" barrier once the wgmmas reading it completed
//   (one batch kept in flight); then the epilogue: bias, SwiGLU for the first projection (a gate/up pair is one
//   thread's columns 2c, 2c + 1), bf16 or fp32 out.
// Each thread converts exactly the blocks it copied, so its own cp.async.wait_group orders them; the barrier's
// release / acquire carries both tiles (cp.async and st.shared writes, generic proxy) to the consumers, whose
// fence.proxy.async after the acquire orders them before wgmma's async-proxy reads: a proxy fence anywhere on the
// causality path from the write to the read serves (PTX ISA 8.9.5), and in the consumer it cannot wait on the
// producer's copies still in flight for later steps.
// Version 1 (the mma.sync version, moe_prefill.cu, ran 171 TFLOP/s overall in prefill).
// CPU reference: cpu::expert_linear (+ cpu::swiglu).
#include "runner/cuda/moe_layout.h"
#include "runner/cuda/moe_plan.h"
#include "runner/cuda/moe_wgmma.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kTileM = kMoePrefillTileRows;  // grouped rows: two consumer warpgroups of m64
constexpr int kTileN = kMoePrefillWgmmaTileN;
constexpr int kTileK = 64;                   // one 128-byte swizzle row of bf16
constexpr int kStages = 4, kRawStages = 3, kLookahead = 2;
constexpr int kProducerThreads = 128, kConsumerWarps = 8, kThreads = kProducerThreads + 32 * kConsumerWarps;
// setmaxnreg: the CTA's pool is 168 x 384 (launch bounds); producer + 2 x consumer must not exceed 504.
constexpr int kProducerRegisters = 104, kConsumerRegisters = 200;
static_assert(kProducerRegisters + 2 * kConsumerRegisters <= 504);

constexpr int kABytes = kTileM * kTileK * 2;
constexpr int kBBytes = kTileN * kTileK * 2;
constexpr int kRawBytes = kTileN * 2 * 16;  // two MXFP4 blocks per weight row
constexpr int kBOffset = kStages * kABytes;
constexpr int kRawOffset = kBOffset + kStages * kBBytes;
constexpr int kBarrierOffset = kRawOffset + kRawStages * kRawBytes;
constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + kSwizzleAtomBytes;  // + slack to align the base
static_assert(kABytes % kSwizzleAtomBytes == 0 && kBBytes % kSwizzleAtomBytes == 0 && kRawOffset % 16 == 0);

constexpr int kARowsPerThread = kTileM * 8 / kProducerThreads;    // 16-byte chunks of A a thread copies
constexpr int kBlocksPerThread = kTileN * 2 / kProducerThreads;  // MXFP4 blocks a thread copies and converts
static_assert(kTileM * 8 % kProducerThreads == 0 && kTileN * 2 % kProducerThreads == 0);

using Item = MoeItem;
__device__ Item item_at(const MoeGemmParams& p, int item, int n_tiles) {
  return moe_item_at(p, item, n_tiles, kTileM, kTileN);
}

// Shared memory: A stages, B stages, raw stages, then the barriers (full, empty).
struct Shared {
  unsigned char* base;
  uint64_t* full;
  uint64_t* empty;
  __device__ unsigned char* a(int stage) const { return base + stage * kABytes; }
  __device__ unsigned char* b(int stage) const { return base + kBOffset + stage * kBBytes; }
  __device__ unsigned char* raw(int stage) const { return base + kRawOffset + stage * kRawBytes; }
};

// ---- producer ---------------------------------------------------------------------------------------------------------
// Thread t copies A chunk t % 8 of rows t / 8 + 16 i, and MXFP4 blocks q = t + 128 i (weight row q / 2 of the
// item, block 2 step + q % 2), which it later converts to bf16 chunks 4 (q % 2) .. 4 (q % 2) + 3 of that row.
struct Producer {
  const MoeGemmParams& p;
  Shared s;
  int n_tiles, ksteps, blocks_per_row;
  int t;
  int a_row[kARowsPerThread];                 // x row of each A row, -1 past the tile's rows
  const uint8_t* blocks[kBlocksPerThread];   // each weight row's first block (+ q % 2), null past N
  const uint8_t* scales[kBlocksPerThread];   // its scale row (+ q % 2), null past N

  __device__ int item_of_local(int local) const { return blockIdx.x + local * gridDim.x; }

  __device__ void start_copies(int local) {
    const Item it = item_at(p, item_of_local(local), n_tiles);
#pragma unroll
    for (int i = 0; i < kARowsPerThread; ++i) {
      const int r = t / 8 + 16 * i;
      a_row[i] = r < it.rows ? (p.x_row != nullptr ? p.x_row[it.row0 + r] : it.row0 + r) : -1;
    }
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const int64_t n = it.n0 + q / 2;
      blocks[i] = n < p.w.out_features
                      ? p.w.blocks + ((it.expert * p.w.out_features + n) * blocks_per_row + q % 2) * 16
                      : nullptr;
    }
  }

  __device__ void start_scales(int local) {
    const Item it = item_at(p, item_of_local(local), n_tiles);
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const int64_t n = it.n0 + q / 2;
      scales[i] = n < p.w.out_features ? p.w.scales + (it.expert * p.w.out_features + n) * blocks_per_row + q % 2
                                       : nullptr;
    }
  }

  // Copies of global step g into A stage g % kStages and raw stage g % kRawStages, once the consumers gave the
  // A/B stage back (its raw stage was converted by this thread in an earlier iteration).
  __device__ void copy_step(int g) {
    const int step = g % ksteps;
    if (step == 0) start_copies(g / ksteps);
    mbarrier_wait_or_trap(&s.empty[g % kStages], ((g / kStages) & 1) ^ 1);
    const bf16* x = static_cast<const bf16*>(p.x);
    unsigned char* a = s.a(g % kStages);
    const int chunk = t % 8;
    const int64_t k = static_cast<int64_t>(step) * kTileK + chunk * 8;
#pragma unroll
    for (int i = 0; i < kARowsPerThread; ++i) {
      const bool ok = a_row[i] >= 0 && k < p.w.in_features;
      cp_async_16(a + swizzled_chunk_offset(t / 8 + 16 * i, chunk), ok ? x + a_row[i] * p.w.in_features + k : x, ok);
    }
    unsigned char* raw = s.raw(g % kRawStages);
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const bool ok = blocks[i] != nullptr && 2 * step + q % 2 < blocks_per_row;
      cp_async_16(raw + q * 16, ok ? blocks[i] + step * 32 : p.w.blocks, ok);
    }
  }

  __device__ void load_scales(int g, uint32_t (&out)[kBlocksPerThread]) {
    const int step = g % ksteps;
    if (step == 0) start_scales(g / ksteps);
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const bool ok = scales[i] != nullptr && 2 * step + q % 2 < blocks_per_row;
      out[i] = ok ? __ldg(scales[i] + 2 * step) : 0u;
    }
  }

  // Raw stage g % kRawStages -> bf16 B stage g % kStages.
  __device__ void convert_step(int g, const uint32_t (&scale)[kBlocksPerThread]) {
    const unsigned char* raw = s.raw(g % kRawStages);
    unsigned char* b = s.b(g % kStages);
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const uint4 block = *reinterpret_cast<const uint4*>(raw + q * 16);
      const uint32_t factor = mxfp4_scale_bf16x2(scale[i]);
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        uint32_t v[4];
        mxfp4_word_to_bf16(word_of(block, w), factor, v);
        *reinterpret_cast<uint4*>(b + swizzled_chunk_offset(q / 2, 4 * (q % 2) + w)) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }

  // Step g is converted and handed over as soon as its copies landed, before the copies of step g + kLookahead
  // wait for their stage: so the consumers can run up to kLookahead converted steps ahead of the producer.
  __device__ void run(int total) {
    // One group per step, empty ones past the end, so that wait_group<kLookahead - 1> means "step g has landed".
#pragma unroll 1
    for (int g = 0; g < kLookahead; ++g) {
      if (g < total) copy_step(g);
      cp_async_commit();
    }
    uint32_t scale[kBlocksPerThread], next_scale[kBlocksPerThread] = {};
    if (total > 0) load_scales(0, scale);
    for (int g = 0; g < total; ++g) {
      if (g + 1 < total) load_scales(g + 1, next_scale);
      cp_async_wait_pending<kLookahead - 1>();
      convert_step(g, scale);
      mbarrier_arrive(&s.full[g % kStages]);
      if (g + kLookahead < total) copy_step(g + kLookahead);
      cp_async_commit();
#pragma unroll
      for (int i = 0; i < kBlocksPerThread; ++i) scale[i] = next_scale[i];
    }
  }
};

// ---- consumers --------------------------------------------------------------------------------------------------------
template <bool kSwiglu>
__device__ void store_tile(const MoeGemmParams& p, const Item& it, const float (&acc)[96], int group, int warp,
                           int lane) {
  const int64_t N = p.w.out_features;
  const float* bias = p.w.bias + it.expert * N;
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int j = 0; j < kTileN / 8; ++j) {
    const int64_t col = it.n0 + 8 * j + 2 * c;  // even, and N is even: col + 1 < N too
    if (col >= N) continue;
    const float2 b = *reinterpret_cast<const float2*>(bias + col);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = group * 64 + warp * 16 + g + 8 * h;
      if (r >= it.rows) continue;
      const int64_t row = it.row0 + r;
      const float v0 = acc[4 * j + 2 * h] + b.x, v1 = acc[4 * j + 2 * h + 1] + b.y;
      if constexpr (kSwiglu) {
        static_cast<bf16*>(p.out)[row * (N / 2) + col / 2] =
            __float2bfloat16_rn(swiglu(v0, v1, p.swiglu_alpha, p.swiglu_limit));
      } else {
        *reinterpret_cast<float2*>(static_cast<float*>(p.out) + row * N + col) = make_float2(v0, v1);
      }
    }
  }
}

template <bool kSwiglu>
__device__ void consume(const MoeGemmParams& p, const Shared& s, int n_tiles, int items, int ksteps) {
  const int group = threadIdx.x / 128 - 1, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const uint32_t base = shared_address(s.base);
  float acc[96];
  int g = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    for (int step = 0; step < ksteps; ++step, ++g) {
      const int stage = g % kStages;
      mbarrier_wait_or_trap(&s.full[stage], (g / kStages) & 1);
      fence_proxy_async_shared();  // the stage's generic-proxy writes, now observed, before wgmma reads them
      const uint32_t a = base + stage * kABytes + group * 64 * kSwizzleRowBytes;
      const uint32_t b = base + kBOffset + stage * kBBytes;
      wgmma_fence_registers(acc);
      wgmma_fence();
#pragma unroll
      for (int k16 = 0; k16 < kTileK / 16; ++k16)
        wgmma_m64n192k16_ss(acc, sw128_descriptor(a + 32 * k16), sw128_descriptor(b + 32 * k16), step > 0 || k16 > 0);
      wgmma_commit();
      wgmma_wait<1>();  // the previous step's batch is done: its stage can be refilled
      wgmma_fence_registers(acc);
      if (step > 0 && lane == 0) mbarrier_arrive(&s.empty[(g - 1) % kStages]);
    }
    wgmma_wait<0>();
    wgmma_fence_registers(acc);
    if (lane == 0) mbarrier_arrive(&s.empty[(g - 1) % kStages]);
    store_tile<kSwiglu>(p, item_at(p, item, n_tiles), acc, group, warp, lane);
  }
}

template <bool kSwiglu>
__global__ void __launch_bounds__(kThreads, 1) moe_prefill_wgmma_kernel(const __grid_constant__ MoeGemmParams p,
                                                                         int n_tiles) {
  extern __shared__ unsigned char shared_bytes[];
  Shared s;
  s.base = swizzle_aligned(shared_bytes);
  s.full = reinterpret_cast<uint64_t*>(s.base + kBarrierOffset);
  s.empty = s.full + kStages;
  init_stage_barriers(s.full, s.empty, kStages, kProducerThreads, kConsumerWarps);
  const int items = *p.routing.num_tiles * n_tiles;
  const int ksteps = static_cast<int>((p.w.in_features + kTileK - 1) / kTileK);
  if (threadIdx.x < kProducerThreads) {
    warpgroup_registers_release<kProducerRegisters>();
    Producer producer{p, s, n_tiles, ksteps, static_cast<int>(p.w.in_features / 32), static_cast<int>(threadIdx.x)};
    producer.run(cta_item_count(items) * ksteps);
  } else {
    warpgroup_registers_claim<kConsumerRegisters>();
    consume<kSwiglu>(p, s, n_tiles, items, ksteps);
  }
}

template <bool kSwiglu>
void launch_typed(cudaStream_t stream, const MoeGemmParams& p) {
  allow_dynamic_shared_memory<moe_prefill_wgmma_kernel<kSwiglu>>(kSharedBytes);
  const MoeGrid grid = moe_prefill_wgmma_grid(p.rows, p.w.out_features, p.w.in_features, p.routing.num_experts,
                                              device_multiprocessors());
  moe_prefill_wgmma_kernel<kSwiglu><<<grid.blocks, kThreads, kSharedBytes, stream>>>(p, grid.weight_tiles);
  MOESERVE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_moe_prefill_wgmma(cudaStream_t stream, const MoeGemmParams& params) {
  launch_checked("moe_prefill_wgmma", params,
                 [&](auto swiglu) { launch_typed<decltype(swiglu)::value>(stream, params); });
}

}  // namespace moeserve::cuda
