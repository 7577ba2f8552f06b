// Expert projections for large batches (prefill) on Hopper's wgmma: a persistent, warp-specialised grouped GEMM
// over items of (128 grouped rows of one expert, from the device-built tile list) x (192 weight rows).
//   Two producer warpgroups take alternate 64-k steps (version 3; version 2 had one, which bounded it: ncu on an
//   H200 showed its consumers waiting for "full" ~73% of their cycles). Per step a group copies the item's
//   activation rows (gathered through row_token for the first projection; cp.async, one own step ahead) into a
//   128-byte-swizzled bf16 tile of its A stage, and the raw MXFP4 blocks with their scale words (two own steps
//   ahead) into its raw ring of 2; once a step's copies have landed it dequantises its blocks (two prmt look-ups
//   and a bf16 multiply per four values, moe_layout.h) into the swizzled bf16 B tile of the stage and arrives on
//   the stage's "full" barrier. Stages 0 and 2 belong to group 0, 1 and 3 to group 1.
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
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_layout.h"
#include "runner/cuda/moe_plan.h"
#include "runner/cuda/moe_wgmma.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kTileM = kMoePrefillTileRows;  // grouped rows: two consumer warpgroups of m64
constexpr int kTileN = kMoePrefillWgmmaTileN;
constexpr int kTileK = 64;                   // one 128-byte swizzle row of bf16
// Two producer warpgroups take alternate steps (group g % 2 owns A/B stages g % 2 and g % 2 + 2): dequantising a
// step's 192 x 64 weights takes one warpgroup longer than the consumers' wgmmas over it (ncu, H200: the single
// producer of version 2 issued ~24% of its cycles and waited on its scale loads for ~15%; the consumers waited
// on "full" ~73% of theirs).
constexpr int kProducerGroups = 2, kStages = 2 * kProducerGroups, kRawStages = 2;  // raw stages per group
constexpr int kProducerThreads = 128, kConsumerWarps = 8;
constexpr int kThreads = kProducerGroups * kProducerThreads + 32 * kConsumerWarps;
// setmaxnreg: the CTA's pool is 128 x 512 (launch bounds); 2 x producer + 2 x consumer must not exceed 512.
constexpr int kProducerRegisters = 88, kConsumerRegisters = 168;
static_assert(kProducerGroups * kProducerRegisters + 2 * kConsumerRegisters <= 512);

constexpr int kABytes = kTileM * kTileK * 2;
constexpr int kBBytes = kTileN * kTileK * 2;
constexpr int kRawBlockBytes = kTileN * 2 * 16;      // two MXFP4 blocks per weight row
constexpr int kRawScaleBytes = kTileN * 2 * 4;       // the aligned 32-bit word holding each block's scale byte
constexpr int kRawShiftBytes = kTileN * 2;           // where in its word the byte is (bit offset)
constexpr int kRawBytes = kRawBlockBytes + kRawScaleBytes + kRawShiftBytes;
constexpr int kBOffset = kStages * kABytes;
constexpr int kRawOffset = kBOffset + kStages * kBBytes;
constexpr int kBarrierOffset = kRawOffset + kProducerGroups * kRawStages * kRawBytes;
constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + kSwizzleAtomBytes;  // + slack to align the base
static_assert(kABytes % kSwizzleAtomBytes == 0 && kBBytes % kSwizzleAtomBytes == 0 && kRawOffset % 16 == 0 &&
              kRawBytes % 16 == 0 && kBarrierOffset % 8 == 0 && kSharedBytes <= 227 * 1024);

constexpr int kARowsPerThread = kTileM * 8 / kProducerThreads;    // 16-byte chunks of A a thread copies
constexpr int kBlocksPerThread = kTileN * 2 / kProducerThreads;  // MXFP4 blocks a thread copies and converts
static_assert(kTileM * 8 % kProducerThreads == 0 && kTileN * 2 % kProducerThreads == 0);

using Item = MoeItem;
__device__ Item item_at(const MoeGemmParams& p, int item, int n_tiles) {
  return moe_item_at(p, item, n_tiles, kTileM, kTileN);
}

// Shared memory: A stages, B stages, each producer group's raw stages, then the barriers (full, empty).
struct Shared {
  unsigned char* base;
  uint64_t* full;
  uint64_t* empty;
  __device__ unsigned char* a(int stage) const { return base + stage * kABytes; }
  __device__ unsigned char* b(int stage) const { return base + kBOffset + stage * kBBytes; }
  __device__ unsigned char* raw(int group, int stage) const {
    return base + kRawOffset + (group * kRawStages + stage) * kRawBytes;
  }
};

// ---- producers --------------------------------------------------------------------------------------------------------
// Producer group `group` handles the global steps g = group + 2 i (its own step i). Per own step: the activation
// copies run one own step ahead (mostly L2 hits: the expert's rows are read by every weight tile), the raw MXFP4
// blocks and their scale words two (DRAM), each in its own cp.async group, committed in the order A(i + 1),
// raw(i + 2), so that "A(i) and raw(i) landed" is wait_group 1. Thread t copies A chunk t % 8 of rows t / 8 + 16 j,
// and MXFP4 blocks q = t + 128 j (weight row q / 2 of the item, block 2 step + q % 2) with the 32-bit word that holds
// the block's scale byte (the bytes are 2-byte aligned only), which it later converts to bf16 chunks
// 4 (q % 2) .. 4 (q % 2) + 3 of that row.
struct Producer {
  const MoeGemmParams& p;
  Shared s;
  int n_tiles, ksteps, blocks_per_row;
  int group, t;
  const uint8_t* scales_end;  // one past the layer's scale bytes: a word reaching past it is read byte-wise
  int a_item = -1, raw_item = -1;               // the items the pointers below are for (local indices)
  int a_row[kARowsPerThread];                   // x row of each A row, -1 past the tile's rows
  const uint8_t* blocks[kBlocksPerThread];     // each weight row's first block (+ q % 2), null past N
  const uint8_t* scales[kBlocksPerThread];     // its first scale byte (+ q % 2), null past N

  __device__ int item_of_local(int local) const { return blockIdx.x + local * gridDim.x; }

  __device__ void start_a_item(int local) {
    const Item it = item_at(p, item_of_local(local), n_tiles);
#pragma unroll
    for (int i = 0; i < kARowsPerThread; ++i) {
      const int r = t / 8 + 16 * i;
      a_row[i] = r < it.rows ? (p.x_row != nullptr ? p.x_row[it.row0 + r] : it.row0 + r) : -1;
    }
    a_item = local;
  }

  __device__ void start_raw_item(int local) {
    const Item it = item_at(p, item_of_local(local), n_tiles);
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const int64_t n = it.n0 + q / 2;
      const int64_t row = (it.expert * p.w.out_features + n) * blocks_per_row + q % 2;
      blocks[i] = n < p.w.out_features ? p.w.blocks + row * 16 : nullptr;
      scales[i] = n < p.w.out_features ? p.w.scales + row : nullptr;
    }
    raw_item = local;
  }

  // Activations of global step g into A stage g % kStages, once the consumers gave the stage back.
  __device__ void copy_a(int g) {
    const int step = g % ksteps;
    if (g / ksteps != a_item) start_a_item(g / ksteps);
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
  }

  // Raw blocks and scale words of global step g (own step g / 2) into this group's raw stage (g / 2) % kRawStages,
  // whose previous contents (own step g / 2 - 2) this thread converted already.
  __device__ void copy_raw(int g) {
    const int step = g % ksteps;
    if (g / ksteps != raw_item) start_raw_item(g / ksteps);
    unsigned char* raw = s.raw(group, (g / 2) % kRawStages);
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const bool ok = blocks[i] != nullptr && 2 * step + q % 2 < blocks_per_row;
      cp_async_16(raw + q * 16, ok ? blocks[i] + step * 32 : p.w.blocks, ok);
      const uint8_t* byte = ok ? scales[i] + 2 * step : p.w.scales;
      const uintptr_t address = reinterpret_cast<uintptr_t>(byte);
      const uint8_t* word = reinterpret_cast<const uint8_t*>(address & ~uintptr_t{3});
      unsigned char* slot = raw + kRawBlockBytes + q * 4;
      if (!ok || word + 4 <= scales_end) {
        cp_async_4(slot, word, ok);
        raw[kRawBlockBytes + kRawScaleBytes + q] = static_cast<unsigned char>(8 * (address & 3));
      } else {  // the layer's last scale bytes: their word would reach past the tensor
        *reinterpret_cast<uint32_t*>(slot) = __ldg(byte);
        raw[kRawBlockBytes + kRawScaleBytes + q] = 0;
      }
    }
  }

  // Raw stage of global step g -> bf16 B stage g % kStages.
  __device__ void convert_step(int g) {
    const unsigned char* raw = s.raw(group, (g / 2) % kRawStages);
    unsigned char* b = s.b(g % kStages);
#pragma unroll
    for (int i = 0; i < kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const uint4 block = *reinterpret_cast<const uint4*>(raw + q * 16);
      const uint32_t word = *reinterpret_cast<const uint32_t*>(raw + kRawBlockBytes + q * 4);
      const uint32_t scale = (word >> raw[kRawBlockBytes + kRawScaleBytes + q]) & 0xffu;
      const uint32_t factor = mxfp4_scale_bf16x2(scale);
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        uint32_t v[4];
        mxfp4_word_to_bf16(word_of(block, w), factor, v);
        *reinterpret_cast<uint4*>(b + swizzled_chunk_offset(q / 2, 4 * (q % 2) + w)) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }

  __device__ void run(int total) {
    const int mine = total > group ? (total - group + 1) / 2 : 0;  // own steps
    auto global = [&](int own) { return group + 2 * own; };
    // Groups, in order: raw(0), A(0), raw(1), then per own step i: A(i + 1), raw(i + 2) (empty ones past the end).
    if (mine > 0) copy_raw(global(0));
    cp_async_commit();
    if (mine > 0) copy_a(global(0));
    cp_async_commit();
    if (mine > 1) copy_raw(global(1));
    cp_async_commit();
    for (int i = 0; i < mine; ++i) {
      cp_async_wait_pending<1>();  // all but raw(i + 1): A(i) and raw(i) landed
      convert_step(global(i));
      mbarrier_arrive(&s.full[global(i) % kStages]);
      if (i + 1 < mine) copy_a(global(i + 1));
      cp_async_commit();
      if (i + 2 < mine) copy_raw(global(i + 2));
      cp_async_commit();
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
  const int group = threadIdx.x / 128 - kProducerGroups, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
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
  pdl_prologue();
  extern __shared__ unsigned char shared_bytes[];
  Shared s;
  s.base = swizzle_aligned(shared_bytes);
  s.full = reinterpret_cast<uint64_t*>(s.base + kBarrierOffset);
  s.empty = s.full + kStages;
  init_stage_barriers(s.full, s.empty, kStages, kProducerThreads, kConsumerWarps);
  const int items = *p.routing.num_tiles * n_tiles;
  const int ksteps = static_cast<int>((p.w.in_features + kTileK - 1) / kTileK);
  if (threadIdx.x < kProducerGroups * kProducerThreads) {
    warpgroup_registers_release<kProducerRegisters>();
    const int blocks_per_row = static_cast<int>(p.w.in_features / 32);
    Producer producer{p,
                      s,
                      n_tiles,
                      ksteps,
                      blocks_per_row,
                      static_cast<int>(threadIdx.x) / kProducerThreads,
                      static_cast<int>(threadIdx.x) % kProducerThreads,
                      p.w.scales + static_cast<int64_t>(p.routing.num_experts) * p.w.out_features * blocks_per_row};
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
  MOESERVE_CUDA_CHECK(cuda_launch(moe_prefill_wgmma_kernel<kSwiglu>, grid.blocks, kThreads, kSharedBytes, stream, p,
                                  grid.weight_tiles));
}

}  // namespace

void launch_moe_prefill_wgmma(cudaStream_t stream, const MoeGemmParams& params) {
  launch_checked("moe_prefill_wgmma", params,
                 [&](auto swiglu) { launch_typed<decltype(swiglu)::value>(stream, params); });
}

}  // namespace moeserve::cuda
