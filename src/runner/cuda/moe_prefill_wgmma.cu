// Expert projections for large batches (prefill) on Hopper's wgmma: a persistent, warp-specialised grouped GEMM
// over items of (128 grouped rows of one expert, from the device-built tile list) x (192 weight rows); the same
// kernel over 256 rows x 128 weight rows for prefill_wgmma_m256 (TileShape below: each converted weight value then
// serves 256 rows, and each consumer warpgroup runs two m64 sub-tiles).
//   Two producer warpgroups take alternate 64-k steps (version 3; version 2 had one, which bounded it: ncu on an
//   H200 showed its consumers waiting for "full" ~73% of their cycles). Per step a group copies the item's
//   activation rows (gathered through row_token for the first projection; cp.async, one own step ahead) into a
//   128-byte-swizzled bf16 tile of its A stage, and the raw MXFP4 blocks with their scale words (kRawStages own
//   steps ahead: 2, or 4 for prefill_wgmma_deep) into its raw ring; once a step's raw copies have landed it
//   dequantises its blocks (two prmt look-ups and a bf16 multiply per four values, moe_layout.h) into the swizzled
//   bf16 B tile of the stage and arrives on the stage's "full" barrier, which also waits for the activation copies
//   (cp.async.mbarrier.arrive: version 4; version 3's producers waited for them before converting). Stages 0 and 2
//   belong to group 0, 1 and 3 to group 1.
//   Two consumer warpgroups (64 rows each): wait "full", fence the async proxy, wgmma m64n192k16 over both shared
//   tiles into fp32 accumulators, give the stage back on its "empty" barrier once the wgmmas reading it completed
//   (one batch kept in flight); then the epilogue: bias, SwiGLU for the first projection (a gate/up pair is one
//   thread's columns 2c, 2c + 1), bf16 or fp32 out.
// Each thread converts exactly the blocks it copied, so its own cp.async.wait_group orders them; the "full"
// barrier carries both tiles to the consumers (B's st.shared writes by the producers' release arrive, A's cp.async
// writes by the asynchronous arrive that fires once they landed; generic proxy), whose
// fence.proxy.async after the acquire orders them before wgmma's async-proxy reads: a proxy fence anywhere on the
// causality path from the write to the read serves (PTX ISA 8.9.5), and in the consumer it cannot wait on the
// producer's copies still in flight for later steps.
// Version 1 (the mma.sync version, moe_prefill.cu, ran 171 TFLOP/s overall in prefill).
// FP8 (x_fp8 set: --activation-dtype fp8): the same pipeline over 128-k steps of e4m3 (a 128-byte row is 128 values,
// so a stage holds twice the k in the same bytes): the activations come quantised per row (launch_quantize_rows_e4m3),
// the producers turn each MXFP4 block into e4m3 bytes with its scale folded into the exponents (moe_layout.h:
// mxfp4_e4m3_table / mxfp4_packed_to_e4m3, relative to the weight row's largest scale, row_scale_max), the
// consumers run wgmma m64n192k32 e4m3 (twice the bf16 rate), and the epilogue applies each token's activation scale
// and each weight row's 2^(s_max - 133). A step's raw stage keeps, per weight row, the two aligned words holding its
// four scale bytes and the word holding its s_max byte. Accumulation is the tensor cores' own (no promotion to
// CUDA-core fp32 every 128 k as DeepSeek-V3's kernels do): its error is measured by the tests, not hidden.
// CPU reference: cpu::expert_linear (+ cpu::swiglu).
#include "runner/cuda/launch.cuh"
#include "runner/cuda/moe_layout.h"
#include "runner/cuda/moe_plan.h"
#include "runner/cuda/moe_wgmma.cuh"

namespace moeserve::cuda {
namespace {

// Two producer warpgroups take alternate steps (group g % 2 owns A/B stages g % 2 and g % 2 + 2): dequantising a
// step's 192 x 64 weights takes one warpgroup longer than the consumers' wgmmas over it (ncu, H200: the single
// producer of version 2 issued ~24% of its cycles and waited on its scale loads for ~15%; the consumers waited
// on "full" ~73% of theirs).
constexpr int kProducerGroups = 2, kStages = 2 * kProducerGroups;
constexpr int kProducerThreads = 128, kConsumerWarps = 8;
constexpr int kThreads = kProducerGroups * kProducerThreads + 32 * kConsumerWarps;
// setmaxnreg: the CTA's pool is 128 x 512 (launch bounds); 2 x producer + 2 x consumer must not exceed 512. The
// producers bound the kernel; measured on an H200 (moe_bench, 256 / 1,024 rows per expert): 104 / 152 runs FP8 4%
// faster than 88 / 168 (more blocks' conversions in flight), bf16 the same; 112 and 120 gain nothing more.
// Tile shapes: kM grouped rows (two consumer warpgroups of kM / 128 m64 sub-tiles each) x kN weight rows, and the
// register split. 128 x 192 (prefill_wgmma): 104 / 152. 256 x 128 (prefill_wgmma_m256, bf16 only: FP8's raw stages
// would not fit beside 256-row A stages): each weight value the producers convert serves twice the rows, and the
// consumers' accumulators are 2 x 64: below 160 registers ptxas serialises their wgmmas (C7512), and the 96 left
// to the producers spill ~100 bytes (their 16 A rows' indices; ptxas -v), which 88 / 168 and 72 / 184 do too.
// kRaw: raw stages per producer group, i.e. how many own steps ahead its DRAM copies run. ncu of the 128 x 192
// kernel with 2 (H100, 1,024 rows per expert) showed the producers stalled on L1TEX a third of their cycles, waiting
// on raw copies issued only two own steps before; prefill_wgmma_deep is that kernel with 4 (bf16 only: FP8's larger
// raw stages leave room for 2).
template <int kM, int kN, int kProducerRegs, int kConsumerRegs, int kRaw = 2>
struct TileShape {
  static constexpr int kTileM = kM, kTileN = kN, kRawStages = kRaw;
  static constexpr int kSubTiles = kM / 128;  // m64 wgmmas of a consumer warpgroup per k slab
  static constexpr int kAccumulators = kN / 2;  // fp32 a thread holds per m64 x kN
  static constexpr int kProducerRegisters = kProducerRegs, kConsumerRegisters = kConsumerRegs;
  static_assert(kProducerGroups * kProducerRegisters + 2 * kConsumerRegisters <= 512);
  static_assert(kM % 128 == 0 && (kN == 192 || kN == 128));
};
using Shape128 = TileShape<kMoePrefillTileRows, kMoePrefillWgmmaTileN, 104, 152>;
using Shape256 = TileShape<kMoePrefillM256TileRows, kMoePrefillM256TileN, 96, 160>;
using Shape128Deep = TileShape<kMoePrefillTileRows, kMoePrefillWgmmaTileN, 104, 152, 4>;

// The layout of one element type: k per step (one 128-byte swizzle row), MXFP4 blocks a weight row has per step, and
// the shared-memory map. bf16: per block the aligned word holding its scale byte and the byte's bit offset; e4m3:
// per weight row the word of its four scale bytes (tiled: one chunk's), a spare word, the word holding its s_max
// byte, and s_max's byte index at byte 13.
template <bool kFp8, typename S>
struct Layout {
  static constexpr int kTileM = S::kTileM, kTileN = S::kTileN;
  static constexpr int kElementBytes = kFp8 ? 1 : 2;
  static constexpr int kTileK = kSwizzleRowBytes / kElementBytes;
  static constexpr int kBlocksPerStep = kTileK / 32;
  static constexpr int kABytes = kTileM * kSwizzleRowBytes;
  static constexpr int kBBytes = kTileN * kSwizzleRowBytes;
  static constexpr int kRawBlockBytes = kTileN * kBlocksPerStep * 16;
  static constexpr int kRawMetaBytes = kFp8 ? kTileN * 16 : kTileN * kBlocksPerStep * 5;
  static constexpr int kRawBytes = kRawBlockBytes + kRawMetaBytes;
  static constexpr int kRawStages = S::kRawStages;
  static constexpr int kBOffset = kStages * kABytes;
  static constexpr int kRawOffset = kBOffset + kStages * kBBytes;
  static constexpr int kBarrierOffset = kRawOffset + kProducerGroups * kRawStages * kRawBytes;
  static constexpr int kHotSlotOffset = kBarrierOffset + 2 * kStages * 8;  // prefill_wgmma_hot: each expert's slot
  static constexpr int kSharedBytes = kHotSlotOffset + kMaxExperts + kSwizzleAtomBytes;  // + slack to align
  static constexpr int kARowsPerThread = kTileM * 8 / kProducerThreads;                   // 16-byte chunks of A
  static constexpr int kBlocksPerThread = kTileN * kBlocksPerStep / kProducerThreads;  // blocks copied, converted
  static_assert(kABytes % kSwizzleAtomBytes == 0 && kBBytes % kSwizzleAtomBytes == 0 && kRawOffset % 16 == 0 &&
                kRawBytes % 16 == 0 && kBarrierOffset % 8 == 0 && kSharedBytes <= 227 * 1024);
  static_assert(kTileM * 8 % kProducerThreads == 0 && kTileN * kBlocksPerStep % kProducerThreads == 0);
};

using Item = MoeItem;
template <typename S>
__device__ Item item_at(const MoeGemmParams& p, int item, int n_tiles) {
  return moe_item_at(p, item, n_tiles, S::kTileM, S::kTileN);
}

// Shared memory: A stages, B stages, each producer group's raw stages, then the barriers (full, empty).
template <bool kFp8, typename S>
struct Shared {
  using L = Layout<kFp8, S>;
  unsigned char* base;
  uint64_t* full;
  uint64_t* empty;
  int8_t* hot_slot;  // prefill_wgmma_hot: each expert's slot in p.hot.tiles, or -1 (moe_hot_slots)
  __device__ unsigned char* a(int stage) const { return base + stage * L::kABytes; }
  __device__ unsigned char* b(int stage) const { return base + L::kBOffset + stage * L::kBBytes; }
  __device__ unsigned char* raw(int group, int stage) const {
    return base + L::kRawOffset + (group * L::kRawStages + stage) * L::kRawBytes;
  }
};

// ---- hot experts (prefill_wgmma_hot) ----------------------------------------------------------------------------------
// One warp: expert e's slot among the launch's hot experts, those of at least min_rows rows, the first `slots` of them
// in expert order, or -1; and (when `expert_of` is set) the expert of each slot, -1 for a slot no expert takes.
__device__ void moe_hot_slots(const MoeRouting& r, int min_rows, int slots, int8_t* slot_of, int* expert_of) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (expert_of != nullptr)
    for (int i = lane; i < slots; i += 32) expert_of[i] = -1;
  __syncwarp();
  int taken = 0;
  for (int e0 = 0; e0 < r.num_experts; e0 += 32) {
    const int e = e0 + lane;
    const bool hot = e < r.num_experts && r.expert_offsets[e + 1] - r.expert_offsets[e] >= min_rows;
    const unsigned mask = __ballot_sync(0xffffffffu, hot);
    const int slot = taken + __popc(mask & ((1u << lane) - 1u));
    const bool in = hot && slot < slots;
    if (e < r.num_experts) slot_of[e] = static_cast<int8_t>(in ? slot : -1);
    if (in && expert_of != nullptr) expert_of[slot] = e;
    taken += __popc(mask);
  }
}

// The B tiles of slot blockIdx.y's expert, one block per (weight tile, k step) = blockIdx.x: what a producer group of
// moe_prefill_wgmma_kernel writes into a B stage for that item's step (the same conversions, in the same swizzled
// image), into p.hot.tiles. Rows past N and blocks past K are zeros.
constexpr int kHotConvertThreads = 128;
template <bool kFp8>
__global__ void __launch_bounds__(kHotConvertThreads) moe_hot_convert_kernel(const __grid_constant__ MoeGemmParams p,
                                                                            int n_tiles, int ksteps) {
  using L = Layout<kFp8, Shape128>;
  constexpr int kB = L::kBlocksPerStep;
  pdl_prologue();
  __shared__ int8_t slot_of[kMaxExperts];
  __shared__ int expert_of[kMoeHotMaxSlots];
  if (threadIdx.x < 32) moe_hot_slots(p.routing, p.hot.min_rows, p.hot.slots, slot_of, expert_of);
  __syncthreads();
  const int expert = expert_of[blockIdx.y];
  if (expert < 0) return;
  const int n_tile = static_cast<int>(blockIdx.x) / ksteps, step = static_cast<int>(blockIdx.x) % ksteps;
  const int64_t N = p.w.out_features;
  const int blocks_per_row = static_cast<int>(p.w.in_features / 32);
  const int64_t expert_first = expert * N * mxfp4_padded_blocks(blocks_per_row);
  const uint8_t* blocks = p.w.blocks + expert_first * 16;
  const uint8_t* scales = p.w.scales + expert_first;
  uint8_t* image = p.hot.tiles +
                   ((static_cast<int64_t>(blockIdx.y) * n_tiles + n_tile) * ksteps + step) * L::kBBytes;
  Mxfp4Bf16Constants constants;
  if constexpr (!kFp8) constants = mxfp4_bf16_constants();
  for (int q = static_cast<int>(threadIdx.x); q < L::kTileN * kB; q += kHotConvertThreads) {
    const int row = q / kB, b = q % kB, kb = kB * step + b;
    const int64_t n = static_cast<int64_t>(n_tile) * L::kTileN + row;
    uint32_t v[16] = {};  // the block's 32 values: 4 chunks of 8 bf16, or 2 of 16 e4m3 (v[0..7])
    if (n < N && kb < blocks_per_row) {
      const int64_t index = mxfp4_tiled_index(n, kb, N, blocks_per_row);
      const uint4 block = *reinterpret_cast<const uint4*>(blocks + index * 16);
      if constexpr (!kFp8) {
        const uint32_t factor = mxfp4_scale_bf16x2(scales[index]);
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          uint32_t out[4];
          mxfp4_word_to_bf16(word_of(block, w), factor, constants, out);
#pragma unroll
          for (int j = 0; j < 4; ++j) v[4 * w + j] = out[j];
        }
      } else {
        const int largest = p.w.row_scale_max[expert * N + n];
        const E4m3Table table = mxfp4_e4m3_table(static_cast<int>(scales[index]) - largest + kMxfp4E4m3MaxShift);
#pragma unroll
        for (int w = 0; w < 4; ++w) mxfp4_packed_to_e4m3(word_of(block, w), table, v[2 * w], v[2 * w + 1]);
      }
    }
    constexpr int kChunks = kFp8 ? 2 : 4;  // 16-byte chunks of the block in its row of the image
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      *reinterpret_cast<uint4*>(image + swizzled_chunk_offset(row, kChunks * b + c)) =
          make_uint4(v[4 * c], v[4 * c + 1], v[4 * c + 2], v[4 * c + 3]);
  }
}

// ---- producers --------------------------------------------------------------------------------------------------------
// Producer group `group` handles the global steps g = group + 2 i (its own step i). Per own step: the activation
// copies run one own step ahead (mostly L2 hits: the expert's rows are read by every weight tile), the raw MXFP4
// blocks and their scale words R = kRawStages (DRAM), each in its own cp.async group, committed in the order
// raw(i + R), A(i + 1) (run() counts the groups). Thread t copies A chunk t % 8 of rows t / 8 + 16 j,
// and MXFP4 blocks q = t + 128 j (weight row t / B + (128 / B) j of the item, block B step + t % B, B = blocks per
// step), which it later converts into chunks of that row's B tile: 4 chunks of 8 bf16, or 2 of 16 e4m3.
// The producers are what bounds this kernel (ncu, H200, 1,024 rows per expert: the consumers spend ~60% of their
// samples waiting on "full"; the FP8 producers issued ~1,400 instructions an own step, ~1,170 since), so the index
// work is kept out of the steps: each copy walks a cursor (item, step) instead of dividing by the step count, the
// item's pointers are set once per item, and a thread's rows are a constant stride apart.
constexpr uint32_t kNotHot = ~0u, kRawHotBit = 31;  // Producer::hot_tile, hot_stages
// kHot (prefill_wgmma_hot): an item of a hot expert (s.hot_slot) takes its B tiles ready from p.hot.tiles, copied
// with its activations (copy_a) into the B stage, and neither copies raw blocks nor converts.
template <bool kFp8, typename S, bool kHot = false>
struct Producer {
  using L = Layout<kFp8, S>;
  static constexpr int kB = L::kBlocksPerStep;
  static constexpr int kRowStride = kProducerThreads / kB;  // weight rows between a thread's blocks
  const MoeGemmParams& p;
  Shared<kFp8, S> s;
  int n_tiles, ksteps, blocks_per_row;
  int group, t;
  const uint8_t* row_max_end;  // one past row_scale_max (FP8): a word reaching past it is read byte-wise
  uint32_t smem = 0;           // s.base's shared-space address: the copies and stores address shared memory by it

  // The item (local index) and k step of a global step; a group's next one is two steps on.
  struct Cursor {
    int local = 0, step = 0;
  };
  __device__ Cursor cursor_of(int g) const { return {g / ksteps, g % ksteps}; }
  __device__ void advance(Cursor& c) const {
    c.step += 2;
    while (c.step >= ksteps) c.step -= ksteps, ++c.local;
  }
  __device__ int item_of_local(int local) const { return blockIdx.x + local * gridDim.x; }

  // A, for item a_item: each of the thread's A rows as its x row's offset in 16-byte units (a row past the tile's rows
  // reads the tile's first row instead: finite values whose products land in tile rows the epilogue does not store),
  // so that a step's copy is one wide multiply-add per row (the launcher bounds x's bytes by 2^36). Version 4 kept the
  // x row and multiplied it by the row's bytes in 64 bits every step: ~18 instructions a row, a quarter of the
  // producers' own step.
  int a_item = -1;
  uint32_t a_chunk[L::kARowsPerThread];
  // kHot, in 32-bit registers (the FP8 producers' 104 spill otherwise): the A item's first ready B tile's index in
  // p.hot.tiles, kNotHot when its expert is not hot; bit i of hot_stages set when raw stage i belongs to a hot step
  // (nothing to convert), bit kRawHotBit when the raw item's expert is hot.
  uint32_t hot_tile = kNotHot;
  uint32_t hot_stages = 0;
  // Raw, for item raw_item: the item's expert's tiled blocks and scales (moe_layout.h); for each of the thread's rows
  // (t / B + (128 / B) i of the item) the tiled index of the block it copies next (the row clamped to 0 past N: its
  // copy is zero-filled) and how far that index moves an own step (2B / 4 chunks: the chunk stride times that, the
  // stride being 4 x 256 but in the matrix's last, shorter slice), and how many of the rows lie inside N. Each copy is
  // then an add and a wide multiply-add (version 4 recomputed the tiled index from the row and block every step).
  // (FP8) The thread's b = t % B: 0 copies the word of the step's four scale bytes of its row (a chunk's: the aligned
  // word at its block's index), 2 the word holding s_max, 1 and 3 none; s_max's byte index in its word is constant
  // per row.
  int raw_item = -1;
  const uint8_t* expert_blocks = nullptr;
  const uint8_t* expert_scales = nullptr;
  uint32_t block_index[L::kBlocksPerThread];
  uint32_t block_advance[L::kBlocksPerThread];
  int rows_in = 0;
  uint32_t scale_shift = 0;          // bf16: the bit offset of this thread's blocks' scale bytes in their words
  const uint8_t* max_src = nullptr;  // FP8, b 2: the word holding s_max of the thread's first row
  int max_shift = 0;                 // its byte index
  bool near_end = false;             // FP8: an s_max word of the thread's rows may reach past row_max_end
  Mxfp4Bf16Constants constants;       // bf16: set in run() through mxfp4_bf16_constants(), so held in registers

  __device__ void start_a_item(int local) {
    const Item it = item_at<S>(p, item_of_local(local), n_tiles);
    const uint32_t row_chunks = static_cast<uint32_t>(p.w.in_features * L::kElementBytes / 16);
#pragma unroll
    for (int i = 0; i < L::kARowsPerThread; ++i) {
      const int r = t / 8 + 16 * i, in_tile = r < it.rows ? r : 0;
      const int row = p.x_row != nullptr ? p.x_row[it.row0 + in_tile] : it.row0 + in_tile;
      a_chunk[i] = static_cast<uint32_t>(row) * row_chunks;
    }
    if constexpr (kHot) {
      const int slot = s.hot_slot[it.expert];
      hot_tile = slot < 0 ? kNotHot
                          : static_cast<uint32_t>((static_cast<int64_t>(slot) * n_tiles + it.n0 / L::kTileN) * ksteps);
    }
    a_item = local;
  }

  // `step`: the item's first step this group copies raw blocks for.
  __device__ void start_raw_item(int local, int step) {
    const Item it = item_at<S>(p, item_of_local(local), n_tiles);
    if constexpr (kHot) {
      const bool hot = s.hot_slot[it.expert] >= 0;
      hot_stages = hot ? hot_stages | (1u << kRawHotBit) : hot_stages & ~(1u << kRawHotBit);
      if (hot) {
        raw_item = local;
        return;
      }
    }
    const int64_t N = p.w.out_features;
    const int64_t expert_first = it.expert * N * mxfp4_padded_blocks(blocks_per_row);
    expert_blocks = p.w.blocks + expert_first * 16;
    expert_scales = p.w.scales + expert_first;
    const int64_t n_first = it.n0 + t / kB;
    rows_in = n_first < N ? static_cast<int>((N - n_first + kRowStride - 1) / kRowStride) : 0;
    const int kb = kB * step + t % kB;
#pragma unroll
    for (int i = 0; i < L::kBlocksPerThread; ++i) {
      const int64_t n = n_first + static_cast<int64_t>(kRowStride) * i;
      const Mxfp4TiledRow row = mxfp4_tiled_row(n < N ? n : 0, N, blocks_per_row);
      block_index[i] = static_cast<uint32_t>(row.row_offset + (kb / kMxfp4ChunkBlocks) * row.chunk_stride +
                                             kb % kMxfp4ChunkBlocks);
      block_advance[i] = static_cast<uint32_t>(row.chunk_stride * (2 * kB / kMxfp4ChunkBlocks));
    }
    scale_shift = static_cast<uint32_t>(8 * (kb % kMxfp4ChunkBlocks));
    if constexpr (kFp8) {
      const int64_t row = it.expert * N + n_first;
      const uintptr_t address = reinterpret_cast<uintptr_t>(p.w.row_scale_max + row);
      max_shift = static_cast<int>(address & 3);
      max_src = reinterpret_cast<const uint8_t*>(address & ~uintptr_t{3});
      near_end = p.w.row_scale_max + row + static_cast<int64_t>(kRowStride) * (L::kBlocksPerThread - 1) + 4 > row_max_end;
    }
    raw_item = local;
  }

  // Activations of cursor c (global step g) into A stage g % kStages, once the consumers gave the stage back. Past
  // the K of the matrix (its last step, when K is not a whole number of steps) a chunk is zero-filled.
  __device__ void copy_a(Cursor c, int g) {
    if (c.local != a_item) start_a_item(c.local);
    const unsigned stage = static_cast<unsigned>(g) % kStages;
    mbarrier_wait_or_trap(&s.empty[stage], ((static_cast<unsigned>(g) / kStages) & 1) ^ 1);
    const uint8_t* x = kFp8 ? p.x_fp8 : static_cast<const uint8_t*>(p.x);
    const int chunk = t % 8;
    // Rows t / 8 + 16 i share row % 8, so their chunks are 16 rows (2,048 bytes) apart.
    const uint32_t a = smem + stage * L::kABytes + swizzled_chunk_offset(t / 8, chunk);
    const int64_t k = static_cast<int64_t>(c.step) * L::kTileK + chunk * (16 / L::kElementBytes);
    const bool k_ok = k < p.w.in_features;
    const uint8_t* at = x + (k_ok ? k * L::kElementBytes : 0);
    const uint32_t bytes = k_ok ? 16 : 0;
#pragma unroll
    for (int i = 0; i < L::kARowsPerThread; ++i)
      cp_async_16_to(a + 16 * kSwizzleRowBytes * i, at + static_cast<uint64_t>(a_chunk[i]) * 16, bytes);
    if constexpr (kHot) {
      if (hot_tile != kNotHot) {  // the step's ready B tile, 16 bytes a thread at a time
        const uint8_t* from = p.hot.tiles + static_cast<uint64_t>(hot_tile + c.step) * L::kBBytes;
        const uint32_t b = smem + L::kBOffset + stage * L::kBBytes;
#pragma unroll
        for (int j = 0; j < L::kBBytes / 16 / kProducerThreads; ++j) {
          const int chunk = t + kProducerThreads * j;
          cp_async_16_to(b + 16 * chunk, from + 16 * chunk, 16);
        }
      }
    }
    // The stage's "full" completes only once these rows landed: the producer never waits for them itself.
    cp_async_mbarrier_arrive(&s.full[stage]);
  }

  // One meta word the careful way: byte-wise for the bytes before `end` when the word reaches past it.
  __device__ static void copy_word_near_end(unsigned char* slot, const uint8_t* word, const uint8_t* end, bool valid) {
    if (!valid || word + 4 <= end) {
      cp_async_4(slot, word, valid);
      return;
    }
    uint32_t bytes = 0;
    for (int j = 0; j < 4 && word + j < end; ++j) bytes |= static_cast<uint32_t>(__ldg(word + j)) << (8 * j);
    *reinterpret_cast<uint32_t*>(slot) = bytes;
  }

  // Raw blocks and scale words of cursor c (global step g, own step g / 2) into this group's raw stage
  // (g / 2) % kRawStages, whose previous contents (own step g / 2 - kRawStages) this warp converted already. The
  // group's next step of the item is two on, so each row's block index then moves by block_advance.
  __device__ void copy_raw(Cursor c, int g) {
    if (c.local != raw_item) start_raw_item(c.local, c.step);
    const unsigned stage = (static_cast<unsigned>(g) / 2) % L::kRawStages;
    if constexpr (kHot) {
      const bool hot = (hot_stages >> kRawHotBit) & 1u;
      hot_stages = hot ? hot_stages | (1u << stage) : hot_stages & ~(1u << stage);
      if (hot) return;
    }
    unsigned char* raw = s.raw(group, stage);
    unsigned char* meta = raw + L::kRawBlockBytes;
    const uint32_t raw_at = smem + L::kRawOffset + (group * L::kRawStages + stage) * L::kRawBytes;
    const int b = t % kB;
    const bool block_ok = kB * c.step + b < blocks_per_row;  // a pad block past K is zero-filled, not read
#pragma unroll
    for (int i = 0; i < L::kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const bool ok = i < rows_in && block_ok;
      const uint32_t index = block_index[i];
      block_index[i] = index + block_advance[i];
      cp_async_16_to(raw_at + q * 16, expert_blocks + static_cast<uint64_t>(index) * 16, ok ? 16 : 0);
      if constexpr (!kFp8) {
        // The aligned word holding this block's scale byte (its chunk's word); the byte's bit offset is the
        // thread's, scale_shift, stored once below.
        cp_async_4_to(raw_at + L::kRawBlockBytes + q * 4, expert_scales + (index & ~3u), ok ? 4 : 0);
      } else {
        // Per weight row (16 bytes): the word of the step's four scale bytes (b = 0: the step is one chunk, so
        // they are one aligned word, at this block's index), the word holding s_max (b = 2), then the two byte
        // indices.
        unsigned char* row_meta = meta + (q / kB) * 16;
        if (b == 0) {
          cp_async_4(row_meta, expert_scales + index, i < rows_in);
        } else if (b == 2) {
          const uint8_t* word = max_src + static_cast<int64_t>(kRowStride) * i;
          const bool in_row = i < rows_in;
          if (!near_end)
            cp_async_4(row_meta + 8, in_row ? word : p.w.scales, in_row);
          else
            copy_word_near_end(row_meta + 8, word, row_max_end, in_row);
          row_meta[13] = static_cast<unsigned char>(max_shift);
        }
      }
    }
    if constexpr (!kFp8) meta[L::kTileN * kB * 4 + t] = static_cast<unsigned char>(scale_shift);
  }

  // Raw stage of global step g -> B stage g % kStages (bf16, or e4m3 with the block scales folded in). The thread's
  // rows t / B + (128 / B) i share row % 8, so their chunks share one swizzle term.
  __device__ void convert_step(int g) {
    if constexpr (kHot)
      if ((hot_stages >> ((static_cast<unsigned>(g) / 2) % L::kRawStages)) & 1u) return;  // copied ready (copy_a)
    const unsigned char* raw = s.raw(group, (static_cast<unsigned>(g) / 2) % L::kRawStages);
    const unsigned char* meta = raw + L::kRawBlockBytes;
    const int row0 = t / kB, b = t % kB;
    const uint32_t swizzle = static_cast<uint32_t>(row0 % 8);
    const uint32_t tile = smem + L::kBOffset + (static_cast<unsigned>(g) % kStages) * L::kBBytes + row0 * kSwizzleRowBytes;
    const uint32_t shift = kFp8 ? 0u : meta[L::kTileN * kB * 4 + t];
#pragma unroll
    for (int i = 0; i < L::kBlocksPerThread; ++i) {
      const int q = t + kProducerThreads * i;
      const uint4 block = *reinterpret_cast<const uint4*>(raw + q * 16);
      const uint32_t row = tile + i * kRowStride * kSwizzleRowBytes;
      if constexpr (!kFp8) {
        const uint32_t word = *reinterpret_cast<const uint32_t*>(meta + q * 4);
        const uint32_t scale = (word >> shift) & 0xffu;
        const uint32_t factor = mxfp4_scale_bf16x2(scale);
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          uint32_t v[4];
          mxfp4_word_to_bf16(word_of(block, w), factor, constants, v);
          st_shared_16(row + (((4 * b + w) ^ swizzle) << 4), v[0], v[1], v[2], v[3]);
        }
      } else {
        const unsigned char* row_meta = meta + (row0 + kRowStride * i) * 16;
        const uint32_t scales = *reinterpret_cast<const uint32_t*>(row_meta);
        const uint32_t max_word = *reinterpret_cast<const uint32_t*>(row_meta + 8);
        const uint32_t scale = byte_permute(scales, 0u, b) & 0xffu;
        const uint32_t largest = byte_permute(max_word, 0u, row_meta[13]) & 0xffu;
        const E4m3Table table =
            mxfp4_e4m3_table(static_cast<int>(scale) - static_cast<int>(largest) + kMxfp4E4m3MaxShift);
        uint32_t v[8];
#pragma unroll
        for (int w = 0; w < 4; ++w) mxfp4_packed_to_e4m3(word_of(block, w), table, v[2 * w], v[2 * w + 1]);
        st_shared_16(row + (((2 * b) ^ swizzle) << 4), v[0], v[1], v[2], v[3]);
        st_shared_16(row + (((2 * b + 1) ^ swizzle) << 4), v[4], v[5], v[6], v[7]);
      }
    }
  }

  __device__ void run(int total) {
    if constexpr (!kFp8) constants = mxfp4_bf16_constants();
    smem = shared_address(s.base);
    constexpr int R = L::kRawStages;
    const int mine = total > group ? (total - group + 1) / 2 : 0;  // own steps
    auto global = [&](int own) { return group + 2 * own; };
    Cursor a = cursor_of(group), r = cursor_of(group);
    // cp.async groups, in order, for R = 2: raw(0), A(0), raw(1), then per own step i: raw(i + 2), A(i + 1) (empty
    // ones past the end), so that at least two groups follow raw(i) when step i waits: wait_group 2 is "raw(i)
    // landed". For R > 2 the prologue is the pairs raw(j), X(j) for j < R (X(0) = A(0), the others empty), then per
    // own step raw(i + R), A(i + 1): exactly 2R - 1 groups follow raw(i), and wait_group 2R - 1 is "raw(i) landed".
    // A stage's activation rows are waited for by its "full" barrier (copy_a), not here: converting step i waits
    // only for raw(i), and raw(i + R) is issued before A(i + 1), which may wait for the consumers to free its stage.
    // (Version 3 waited for A(i) too, issued just one step before: ncu, H100, 256 rows per expert, showed the
    // consumers waiting on "full" ~40% of their samples and the producers on "empty" ~20% of theirs.)
    constexpr int kPending = R == 2 ? 2 : 2 * R - 1;
    if constexpr (R == 2) {
      if (mine > 0) copy_raw(r, global(0)), advance(r);
      cp_async_commit();
      if (mine > 0) copy_a(a, global(0)), advance(a);
      cp_async_commit();
      if (mine > 1) copy_raw(r, global(1)), advance(r);
      cp_async_commit();
    } else {
#pragma unroll
      for (int j = 0; j < R; ++j) {
        if (j < mine) copy_raw(r, global(j)), advance(r);
        cp_async_commit();
        if (j == 0 && mine > 0) copy_a(a, global(0)), advance(a);
        cp_async_commit();
      }
    }
    for (int i = 0; i < mine; ++i) {
      cp_async_wait_pending<kPending>();  // raw(i) landed
      // FP8: a weight row's scale words were copied by lanes beside this one (the row's four blocks are four
      // consecutive lanes): the warp barrier orders their landed copies before these reads, and these reads before
      // the same lanes overwrite the stage R own steps on.
      if constexpr (kFp8) __syncwarp();
      convert_step(global(i));
      mbarrier_arrive(&s.full[static_cast<unsigned>(global(i)) % kStages]);
      if constexpr (kFp8) __syncwarp();
      if (i + R < mine) copy_raw(r, global(i + R)), advance(r);
      cp_async_commit();
      if (i + 1 < mine) copy_a(a, global(i + 1)), advance(a);
      cp_async_commit();
    }
    cp_async_wait_all();  // no copy outlives its thread
  }
};

// ---- consumers --------------------------------------------------------------------------------------------------------
// FP8: output (row r, column n) is acc x_scale[x row of r] 2^(s_max(n) - 133), before the bias.
// Warpgroup `group`'s rows: m64 sub-tile u holds rows group kM / 2 + 64 u + 16 warp + (g, g + 8).
template <typename S>
__device__ __forceinline__ int tile_row(int group, int sub, int warp, int g, int h) {
  return group * (S::kTileM / 2) + 64 * sub + warp * 16 + g + 8 * h;
}

template <bool kFp8, bool kSwiglu, typename S>
__device__ void store_tile(const MoeGemmParams& p, const Item& it, const float (&acc)[S::kSubTiles][S::kAccumulators],
                           int group, int warp, int lane) {
  const int64_t N = p.w.out_features;
  const float* bias = p.w.bias + it.expert * N;
  const int g = lane / 4, c = lane % 4;
  float row_scale[S::kSubTiles][2];
#pragma unroll
  for (int u = 0; u < S::kSubTiles; ++u) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = tile_row<S>(group, u, warp, g, h);
      row_scale[u][h] = 1.0f;
      if constexpr (kFp8)
        if (r < it.rows) row_scale[u][h] = p.x_scale[p.x_row != nullptr ? p.x_row[it.row0 + r] : it.row0 + r];
    }
  }
#pragma unroll
  for (int j = 0; j < S::kTileN / 8; ++j) {
    const int64_t col = it.n0 + 8 * j + 2 * c;  // even, and N is even: col + 1 < N too
    if (col >= N) continue;
    const float2 b = *reinterpret_cast<const float2*>(bias + col);
    float2 column = make_float2(1.0f, 1.0f);
    if constexpr (kFp8) {
      const uint8_t* largest = p.w.row_scale_max + it.expert * N + col;
      column = make_float2(ldexpf(1.0f, largest[0] - kMxfp4E4m3RowExponentBias),
                           ldexpf(1.0f, largest[1] - kMxfp4E4m3RowExponentBias));
    }
#pragma unroll
    for (int u = 0; u < S::kSubTiles; ++u)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = tile_row<S>(group, u, warp, g, h);
      if (r < it.rows) {
        const int64_t row = it.row0 + r;
        float v0 = acc[u][4 * j + 2 * h], v1 = acc[u][4 * j + 2 * h + 1];
        if constexpr (kFp8) v0 = v0 * row_scale[u][h] * column.x, v1 = v1 * row_scale[u][h] * column.y;
        v0 += b.x, v1 += b.y;
        if constexpr (kSwiglu) {
          static_cast<bf16*>(p.out)[row * (N / 2) + col / 2] =
              __float2bfloat16_rn(swiglu(v0, v1, p.swiglu_alpha, p.swiglu_limit));
        } else if (p.out_bf16) {
          *reinterpret_cast<uint32_t*>(static_cast<bf16*>(p.out) + row * N + col) = pack_bf16x2(v0, v1);
        } else {
          *reinterpret_cast<float2*>(static_cast<float*>(p.out) + row * N + col) = make_float2(v0, v1);
        }
      }
    }
  }
}

// One wgmma of 32 bytes of k (k16 bf16 or k32 e4m3) over an m64 sub-tile.
template <bool kFp8, int kN>
__device__ __forceinline__ void wgmma_slab(float (&acc)[kN / 2], uint64_t a, uint64_t b, bool accumulate) {
  if constexpr (kN == 192) {
    if constexpr (kFp8)
      wgmma_m64n192k32_e4m3_ss(acc, a, b, accumulate);
    else
      wgmma_m64n192k16_ss(acc, a, b, accumulate);
  } else {
    static_assert(kN == 128 && !kFp8, "n128 is bf16 only");
    wgmma_m64n128k16_ss(acc, a, b, accumulate);
  }
}

template <bool kFp8, bool kSwiglu, typename S>
__device__ void consume(const MoeGemmParams& p, const Shared<kFp8, S>& s, int n_tiles, int items, int ksteps) {
  using L = Layout<kFp8, S>;
  const int group = threadIdx.x / 128 - kProducerGroups, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const uint32_t base = shared_address(s.base);
  float acc[S::kSubTiles][S::kAccumulators];
  int g = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    for (int step = 0; step < ksteps; ++step, ++g) {
      const int stage = g % kStages;
      mbarrier_wait_or_trap(&s.full[stage], (g / kStages) & 1);
      fence_proxy_async_shared();  // the stage's generic-proxy writes, now observed, before wgmma reads them
      const uint32_t a = base + stage * L::kABytes + group * (S::kTileM / 2) * kSwizzleRowBytes;
      const uint32_t b = base + L::kBOffset + stage * L::kBBytes;
      wgmma_fence_registers(acc);
      wgmma_fence();
      // Four slabs of 32 bytes of k each: k16 of bf16 or k32 of e4m3. Every sub-tile, also past a partial tile's
      // rows: skipping them on the item's row count made ptxas serialise the wgmmas (C7520).
#pragma unroll
      for (int slab = 0; slab < 4; ++slab) {
        const uint64_t db = sw128_descriptor(b + 32 * slab);
#pragma unroll
        for (int u = 0; u < S::kSubTiles; ++u)
          wgmma_slab<kFp8, S::kTileN>(acc[u], sw128_descriptor(a + 64 * u * kSwizzleRowBytes + 32 * slab), db,
                                      step > 0 || slab > 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous step's batch is done: its stage can be refilled
      wgmma_fence_registers(acc);
      if (step > 0 && lane == 0) mbarrier_arrive(&s.empty[(g - 1) % kStages]);
    }
    wgmma_wait<0>();
    wgmma_fence_registers(acc);
    if (lane == 0) mbarrier_arrive(&s.empty[(g - 1) % kStages]);
    store_tile<kFp8, kSwiglu, S>(p, item_at<S>(p, item, n_tiles), acc, group, warp, lane);
  }
}

template <bool kFp8, bool kSwiglu, typename S, bool kHot = false>
__global__ void __launch_bounds__(kThreads, 1) moe_prefill_wgmma_kernel(const __grid_constant__ MoeGemmParams p,
                                                                         int n_tiles) {
  using L = Layout<kFp8, S>;
  pdl_prologue();
  extern __shared__ unsigned char shared_bytes[];
  Shared<kFp8, S> s;
  s.base = swizzle_aligned(shared_bytes);
  s.full = reinterpret_cast<uint64_t*>(s.base + L::kBarrierOffset);
  s.empty = s.full + kStages;
  s.hot_slot = reinterpret_cast<int8_t*>(s.base + L::kHotSlotOffset);
  if constexpr (kHot)
    if (threadIdx.x < 32) moe_hot_slots(p.routing, p.hot.min_rows, p.hot.slots, s.hot_slot, nullptr);
  init_stage_barriers(s.full, s.empty, kStages, kProducerThreads, kConsumerWarps);  // its __syncthreads: the slots too
  const int items = moe_class_tile_count(p.routing) * n_tiles;
  const int ksteps = static_cast<int>((p.w.in_features + L::kTileK - 1) / L::kTileK);
  if (threadIdx.x < kProducerGroups * kProducerThreads) {
    warpgroup_registers_release<S::kProducerRegisters>();
    const int blocks_per_row = static_cast<int>(p.w.in_features / 32);
    const int64_t weight_rows = static_cast<int64_t>(p.routing.num_experts) * p.w.out_features;
    Producer<kFp8, S, kHot> producer{p,
                            s,
                            n_tiles,
                            ksteps,
                            blocks_per_row,
                            static_cast<int>(threadIdx.x) / kProducerThreads,
                            static_cast<int>(threadIdx.x) % kProducerThreads,
                            kFp8 ? p.w.row_scale_max + weight_rows : nullptr};
    producer.run(cta_item_count(items) * ksteps);
  } else {
    warpgroup_registers_claim<S::kConsumerRegisters>();
    consume<kFp8, kSwiglu, S>(p, s, n_tiles, items, ksteps);
  }
}

template <bool kFp8, bool kSwiglu, typename S, bool kHot = false>
void launch_typed(cudaStream_t stream, const MoeGemmParams& p) {
  constexpr auto kernel = moe_prefill_wgmma_kernel<kFp8, kSwiglu, S, kHot>;
  constexpr int kBytes = Layout<kFp8, S>::kSharedBytes;
  allow_dynamic_shared_memory<kernel>(kBytes);
  const auto grid_of = std::is_same_v<S, Shape256> ? moe_prefill_wgmma_m256_grid : moe_prefill_wgmma_grid;
  static_assert(!kFp8 || S::kRawStages == 2, "FP8's raw stages fit two a group");
  // The producers hold each A row's place in x in 16-byte units, 32 bits (x's rows number at most p.rows).
  const int64_t x_chunks = static_cast<int64_t>(p.rows) * p.w.in_features * Layout<kFp8, S>::kElementBytes / 16;
  if (x_chunks > int64_t{UINT32_MAX})
    fail_cuda("moe_prefill_wgmma", "the grouped rows times the inputs exceed the kernel's 2^36 bytes of activations; "
              "take fewer tokens a step (--max-batched-tokens)", __FILE__, __LINE__);
  const MoeGrid grid =
      grid_of(p.rows, p.w.out_features, p.w.in_features, p.routing.num_experts, device_multiprocessors());
  if constexpr (kHot) {
    // The hot experts' B tiles first, then the GEMM that copies them (stream order).
    const int ksteps = static_cast<int>((p.w.in_features + Layout<kFp8, S>::kTileK - 1) / Layout<kFp8, S>::kTileK);
    // The producers index the scratch's tiles in 32 bits (Producer::hot_tile).
    if (static_cast<int64_t>(p.hot.slots) * grid.weight_tiles * ksteps >= int64_t{UINT32_MAX})
      fail_cuda("moe_prefill_wgmma_hot", "the hot scratch would hold 2^32 tiles or more; take fewer slots", __FILE__,
                __LINE__);
    const dim3 convert_grid(static_cast<unsigned>(grid.weight_tiles * ksteps), static_cast<unsigned>(p.hot.slots));
    MOESERVE_CUDA_CHECK(cuda_launch(moe_hot_convert_kernel<kFp8>, convert_grid, kHotConvertThreads, 0, stream, p,
                                    grid.weight_tiles, ksteps));
  }
  MOESERVE_CUDA_CHECK(cuda_launch(kernel, grid.blocks, kThreads, kBytes, stream, p, grid.weight_tiles));
}

}  // namespace

void launch_moe_prefill_wgmma(cudaStream_t stream, const MoeGemmParams& params) {
  if (params.x_fp8 != nullptr && (params.x_scale == nullptr || params.w.row_scale_max == nullptr))
    fail_cuda("moe_prefill_wgmma", "FP8 activations need x_scale and the weights' row_scale_max", __FILE__, __LINE__);
  launch_checked("moe_prefill_wgmma", params, [&](auto swiglu) {
    if (params.x_fp8 != nullptr)
      launch_typed<true, decltype(swiglu)::value, Shape128>(stream, params);
    else
      launch_typed<false, decltype(swiglu)::value, Shape128>(stream, params);
  });
}

void launch_moe_prefill_wgmma_hot(cudaStream_t stream, const MoeGemmParams& params) {
  if (params.x_fp8 != nullptr && (params.x_scale == nullptr || params.w.row_scale_max == nullptr))
    fail_cuda("moe_prefill_wgmma_hot", "FP8 activations need x_scale and the weights' row_scale_max", __FILE__, __LINE__);
  if (params.hot.tiles == nullptr || params.hot.slots < 1 || params.hot.slots > kMoeHotMaxSlots ||
      params.hot.min_rows < 1)
    fail_cuda("moe_prefill_wgmma_hot", "needs a scratch of moe_hot_bytes (params.hot.tiles), 1-127 slots and "
              "min_rows >= 1", __FILE__, __LINE__);
  launch_checked("moe_prefill_wgmma_hot", params, [&](auto swiglu) {
    if (params.x_fp8 != nullptr)
      launch_typed<true, decltype(swiglu)::value, Shape128, true>(stream, params);
    else
      launch_typed<false, decltype(swiglu)::value, Shape128, true>(stream, params);
  });
}

void launch_moe_prefill_wgmma_m256(cudaStream_t stream, const MoeGemmParams& params) {
  if (params.x_fp8 != nullptr)
    fail_cuda("moe_prefill_wgmma_m256", "takes bf16 activations only (FP8: prefill_wgmma)", __FILE__, __LINE__);
  launch_checked("moe_prefill_wgmma_m256", params,
                 [&](auto swiglu) { launch_typed<false, decltype(swiglu)::value, Shape256>(stream, params); });
}

void launch_moe_prefill_wgmma_deep(cudaStream_t stream, const MoeGemmParams& params) {
  if (params.x_fp8 != nullptr)
    fail_cuda("moe_prefill_wgmma_deep", "takes bf16 activations only (FP8: prefill_wgmma)", __FILE__, __LINE__);
  launch_checked("moe_prefill_wgmma_deep", params,
                 [&](auto swiglu) { launch_typed<false, decltype(swiglu)::value, Shape128Deep>(stream, params); });
}

}  // namespace moeserve::cuda
