// Sampling on the GPU. Greedy rows: the argmax of each row (the lowest id among equal maxima). Rows that sample:
// the same token as the CPU sampler for the same (logits, params, seed, sample index).
// CPU reference: moeserve::argmax and moeserve::sample_token (sampling/sampler.cc), whose rules this file follows.
//
// What sample_token computes, restated so that it parallelises. Weights are w = exp(double(x - max) / T). Let O
// be the ids in descending weight order, ties by ascending id (the CPU's stable sort). Then top-k keeps the first
// k of O (ties kept in id order); top-p, over the weights top-k left (total_k = their sum), keeps the first L_p of
// O where L_p is the first length whose cumulative weight reaches top_p * total_k; min-p drops w < min_p (the
// largest surviving weight is exp(0) = 1 exactly: the max logit survives top-k and top-p). So the kept set is a
// prefix of O cut by min-p, and a prefix of O is "w > W, plus the first `ties` ids with w == W" for the weight W
// at its end. The draw then walks ids in order and returns the first whose cumulative weight exceeds u * total.
//
// Design: one block of 512 threads per sampled row, a fixed number of passes over the row (in L2 or HBM):
//   1. the row's max;
//   2. top-k: radix select of the k-th largest key in three passes (11, 11, 10-bit digits, a 2048-bin
//      histogram in shared memory, the crossing bin found by a block scan from the top);
//   3. top-p: the same radix select with each bin holding its weight sum (double), crossing at top_p * total;
//   4. the kept weights' total and last kept id, then the walk (a block scan per 2048-id chunk, stopping at the
//      chunk where the cumulative passes u * total).
// Keys are the float differences x - max as ordered integers: weights are a non-decreasing function of them, so
// the crossing key gives the crossing weight W. Distinct keys can share a weight (differences below ~1e-8 T round
// exp to 1, or deep in exp's subnormal range; and -0 / +0): then an extra census pass counts w > W and w == W
// exactly, so ties are always resolved in weight space by id, as the CPU does. Rows that only set a temperature
// skip 2 and 3 (three passes); top-k alone reads keys only (no exp) in its passes.
// Why not a sort: a segmented radix sort of 256 rows x 201,088 (CUB) moves keys and ids through global memory
// in several passes and needs ~1 GB of scratch; the selection needs only the threshold, never the order.
//
// Small batches (issue 15): one block per row leaves most SMs idle (at batch 1, one SM walks the 800 KB row three
// times), so while rows are fewer than SMs a row goes to a thread-block cluster (sm_90) of 2..16 blocks, each
// owning a contiguous range of ids, for greedy rows and for rows that set only a temperature (see
// sampling_cluster_blocks for the rule). Argmax: each block's best, merged by rank 0 through distributed shared
// memory. Temperature rows: the same three passes, each block over its range: the cluster's max (block maxima
// exchanged); the block's weight total (double); then every block reads the totals in rank order, so each knows
// the cumulative before its range and the grand total (the same sequential sum in every block), and only the block
// whose range holds u * total walks its range from that cumulative. All reductions run in a fixed order: the token
// is the same on every run. Rows with top-k, top-p < 1 or min-p in the same launch run the one-block path on the
// cluster's first block.
//
// Agreement with the CPU: every comparison that decides membership (w > W, w == W, w < min_p) is exact and the
// same on both sides, given equal weights. Sums are not: the CPU adds in id order, the GPU in scan or atomic order,
// and CUDA's exp may differ from glibc's by one ulp. Each such sum is within (n - 1) ulp-relative of the exact sum
// (~2e-11 for n = 201,088, typically ~1e-13), so the GPU picks another token than the CPU only when u * total, or
// top_p * total_k, lands within that relative distance of a cumulative boundary (a chance of ~1e-8 per draw or
// less). For the same reason the GPU's choice in such a case may vary between runs (shared-memory atomics).
// The cluster path sums in another order again (block ranges, then blocks in rank order): the same caveat, against
// the CPU and against the one-block path.
#include <cooperative_groups.h>
#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <array>
#include <cfloat>
#include <climits>
#include <cmath>
#include <vector>

#include "runner/cuda/device_common.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/sampling.h"
#include "sampling/sampling_uniform.h"
#include "util/error.h"

namespace moeserve::cuda {
namespace {

__device__ __forceinline__ void keep_better(float& value, int& id, float other, int other_id) {
  if (other > value || (other == value && other_id < id)) {
    value = other;
    id = other_id;
  }
}

// The block's best (value, lowest id) into thread 0's value and id.
__device__ void block_best(float& best, int& best_id) {
  for (int offset = 16; offset > 0; offset >>= 1)
    keep_better(best, best_id, __shfl_xor_sync(0xffffffffu, best, offset), __shfl_xor_sync(0xffffffffu, best_id, offset));
  __shared__ float values[32];
  __shared__ int ids[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    values[warp] = best;
    ids[warp] = best_id;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) keep_better(best, best_id, values[w], ids[w]);
}

__global__ void argmax_kernel(const float* logits, int V, int32_t* out) {
  pdl_prologue();
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  float best = -INFINITY;
  int best_id = V;
  for (int i = threadIdx.x; i < V; i += blockDim.x) keep_better(best, best_id, row[i], i);
  block_best(best, best_id);
  if (threadIdx.x == 0) out[blockIdx.x] = best_id < V ? best_id : 0;  // all -inf (or NaN): id 0, as the CPU argmax
}

constexpr int kThreads = 512;
constexpr int kPerThread = 4;                   // consecutive ids per thread in a chunk: one float4
constexpr int kChunk = kThreads * kPerThread;   // ids per chunk
constexpr int kBins = 2048;                     // radix digits of 11, 11 and 10 bits
__device__ __forceinline__ int digit_bits(int pass) { return pass < 2 ? 11 : 10; }
__device__ __forceinline__ int digit_shift(int pass) { return pass == 0 ? 21 : pass == 1 ? 10 : 0; }

using IntScan = cub::BlockScan<int, kThreads>;
using DoubleScan = cub::BlockScan<double, kThreads>;

struct Shared {
  unsigned counts[kBins];
  double sums[kBins];
  int winner, lowest, found;
  int winner_above;
  double winner_above_sum;
  typename IntScan::TempStorage int_scan;
  typename DoubleScan::TempStorage double_scan;
};

// The CPU sampler's weight, bit for bit up to exp's last ulp: the float difference, then exp in double.
__device__ __forceinline__ double weight_of(float x, float max_logit, float temperature) {
  return exp(static_cast<double>(x - max_logit) / temperature);
}

// Float -> unsigned with the same order (negative values flipped).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// The row as chunks of kChunk ids; thread t holds ids first .. first + 3, first = base + 4t (-inf past the end,
// which callers skip by id).
struct RowReader {
  const float* row;
  int V;
  bool vectorised;  // V % 4 == 0 and the row 16-byte aligned
  __device__ int first(int base) const { return base + threadIdx.x * kPerThread; }
  __device__ void load(int base, float (&v)[kPerThread]) const {
    const int i = first(base);
    if (vectorised && i + kPerThread <= V) {
      const float4 q = *reinterpret_cast<const float4*>(row + i);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
      for (int j = 0; j < kPerThread; ++j) v[j] = i + j < V ? row[i + j] : -INFINITY;
    }
  }
  // Two chunks' loads in flight before either is used: a pass over a cluster block's range is a few chunks, each
  // otherwise a full load latency.
  template <typename Body>
  __device__ void for_each(Body body) const {
    for (int base = 0; base < V; base += 2 * kChunk) {
      float v[2][kPerThread];
      load(base, v[0]);
      load(base + kChunk, v[1]);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int i = first(base + c * kChunk);
#pragma unroll
        for (int j = 0; j < kPerThread; ++j)
          if (i + j < V) body(i + j, v[c][j]);
      }
    }
  }
};

// Reduction over the block with a commutative op; every thread gets the result (same order on every thread).
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T partial[32];
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();  // partial[] may still be read by a previous call
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  T result = partial[0];
  for (int w = 1; w < kThreads / 32; ++w) result = op(result, partial[w]);
  return result;
}
struct Plus {
  template <typename T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

// Where the descending order of keys (x - max) crosses a target: by count (the k-th largest) or by weight sum
// (the first element at which the cumulative weight reaches target).
struct Crossing {
  float key = 0;           // the crossing element's x - max
  int above = 0;           // elements with a larger key
  double above_sum = 0;    // their weight sum (by_sum only)
  int equal = 0;           // elements with this key
  double total = 0;        // by_sum: the sum of all weights (pass 1's aggregate)
};

// target_fraction > 0: by weight sum, target = fraction * (total >= 0 ? total : the sum of all weights);
// else by count, target = k, with weight sums kept too when with_sums. Without a crossing (rounding left the
// target above the total) the last element.
__device__ Crossing radix_select(const RowReader& reader, float max_logit, float temperature, long long k,
                                 double target_fraction, double total, bool with_sums, Shared& s) {
  const bool by_sum = target_fraction > 0;
  with_sums = with_sums || by_sum;
  double target = by_sum ? target_fraction * total : static_cast<double>(k);
  uint32_t prefix = 0, mask = 0;
  Crossing c;
  c.total = total;
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = digit_shift(pass), bins = 1 << digit_bits(pass), per_thread = bins / kThreads;
    for (int b = threadIdx.x; b < bins; b += kThreads) s.counts[b] = 0, s.sums[b] = 0.0;
    if (threadIdx.x == 0) s.winner = -1, s.lowest = bins;
    __syncthreads();
    reader.for_each([&](int, float x) {
      const uint32_t key = order_key(x - max_logit);
      if ((key & mask) != prefix) return;
      const int digit = (key >> shift) & (bins - 1);
      atomicAdd(&s.counts[digit], 1u);
      if (with_sums) atomicAdd(&s.sums[digit], weight_of(x, max_logit, temperature));
    });
    __syncthreads();
    // Thread t owns bins top - t * per_thread, ... downwards (top = bins - 1): the scan runs in descending order.
    const int top = bins - 1 - threadIdx.x * per_thread;
    int local_count = 0;
    double local_sum = 0.0;
    for (int j = 0; j < per_thread; ++j) local_count += s.counts[top - j], local_sum += s.sums[top - j];
    int count_before;
    double sum_before, aggregate;
    IntScan(s.int_scan).ExclusiveSum(local_count, count_before);
    DoubleScan(s.double_scan).ExclusiveSum(local_sum, sum_before, aggregate);
    if (by_sum && total < 0 && pass == 0) c.total = aggregate, target = target_fraction * aggregate;
    // The highest bin at which the cumulative (including it) reaches the target; by sum, only non-empty bins (a
    // scan's rounding could otherwise let an empty bin claim the crossing).
    int n = c.above + count_before, crossing = -1, lowest = bins;
    double sum = c.above_sum + sum_before;
    for (int j = 0; j < per_thread; ++j) {
      const int b = top - j, count = s.counts[b];
      const bool crosses = by_sum ? count > 0 && sum + s.sums[b] >= target : n + count >= target;
      if (crosses && crossing < 0) crossing = b;
      if (count > 0) lowest = b;
      n += count, sum += s.sums[b];
    }
    if (crossing >= 0) atomicMax(&s.winner, crossing);
    if (lowest < bins) atomicMin(&s.lowest, lowest);
    __syncthreads();
    const int winner = s.winner >= 0 ? s.winner : s.lowest;
    if (winner < bins && (bins - 1 - winner) / per_thread == static_cast<int>(threadIdx.x)) {
      n = c.above + count_before, sum = c.above_sum + sum_before;
      for (int b = top; b > winner; --b) n += s.counts[b], sum += s.sums[b];
      s.winner_above = n, s.winner_above_sum = sum;
    }
    __syncthreads();
    c.above = s.winner_above, c.above_sum = s.winner_above_sum, c.equal = s.counts[winner];
    prefix |= static_cast<uint32_t>(winner) << shift, mask |= static_cast<uint32_t>(bins - 1) << shift;
    __syncthreads();  // everyone has read the histogram before the next pass clears it
  }
  c.key = key_value(prefix);
  return c;
}

// Count and sum of weights above W, and count equal to W, in weight space.
struct WeightClass {
  double weight = 0;
  int above = 0, equal = 0;
  double above_sum = 0;
};

// The weight class of a crossing: from the selection when no other key has the same weight, else by a census.
__device__ WeightClass weight_class(const Crossing& c, const RowReader& reader, float max_logit, float temperature) {
  WeightClass w;
  w.weight = exp(static_cast<double>(c.key) / temperature);
  const float below = nextafterf(c.key, -INFINITY), above = nextafterf(c.key, INFINITY);
  const bool shared_weight = (c.key != -INFINITY && exp(static_cast<double>(below) / temperature) == w.weight) ||
                             (c.key < 0.0f && exp(static_cast<double>(above) / temperature) == w.weight);
  if (!shared_weight) {
    w.above = c.above, w.equal = c.equal, w.above_sum = c.above_sum;
    return w;
  }
  int above_count = 0, equal = 0;
  double above_sum = 0.0;
  reader.for_each([&](int, float x) {
    const double v = weight_of(x, max_logit, temperature);
    if (v > w.weight) ++above_count, above_sum += v;
    equal += v == w.weight;
  });
  w.above = block_reduce(above_count, Plus());
  w.equal = block_reduce(equal, Plus());
  w.above_sum = block_reduce(above_sum, Plus());
  return w;
}

// The kept set: w > weight, the first `ties` ids (in id order) with w == weight, and w >= min_weight (min-p).
struct Cut {
  double weight = -1.0;
  long long ties = 0;
  double min_weight = 0.0;
  __device__ double kept(double w, long long tie_rank) const {
    const bool in_prefix = w > weight || (w == weight && tie_rank < ties);
    return in_prefix && w > 0.0 && !(w < min_weight) ? w : 0.0;
  }
};

__device__ Cut filters(const SampleRow& p, const RowReader& reader, float max_logit, Shared& s) {
  const SamplingParams& params = p.params;
  const int V = reader.V;
  Cut cut;
  cut.min_weight = static_cast<double>(params.min_p);  // * the largest weight, which is 1
  long long kept_length = V;
  double total = -1.0;  // the weights' sum after top-k; unknown until a pass adds them
  if (params.top_k > 0 && params.top_k < V) {
    const bool sums_for_top_p = params.top_p < 1.0f;
    const Crossing c = radix_select(reader, max_logit, params.temperature, params.top_k, 0.0, -1.0, sums_for_top_p, s);
    const WeightClass w = weight_class(c, reader, max_logit, params.temperature);
    cut.weight = w.weight;
    cut.ties = params.top_k - w.above;
    kept_length = params.top_k;
    total = w.above_sum + static_cast<double>(cut.ties) * w.weight;  // top-p's base (weights were summed for it)
  }
  if (params.top_p < 1.0f) {
    const Crossing c = radix_select(reader, max_logit, params.temperature, 0, params.top_p, total, true, s);
    const WeightClass w = weight_class(c, reader, max_logit, params.temperature);
    // Ties needed: the fewest whose cumulative reaches the target, at least one (the crossing element itself).
    const double target = static_cast<double>(params.top_p) * c.total;
    const double needed = w.weight > 0.0 ? ceil((target - w.above_sum) / w.weight) : static_cast<double>(w.equal);
    const long long ties = static_cast<long long>(fmin(fmax(needed, 1.0), static_cast<double>(w.equal)));
    if (w.above + ties < kept_length) cut.weight = w.weight, cut.ties = ties;
  }
  return cut;
}

// The kept weights of a row (after the filters' cut) chunk by chunk, the pass that adds them, and the walk.
struct RowWeights {
  const RowReader& reader;
  float max_logit, temperature;
  Cut cut;
  Shared& s;

  // Kept weights of the thread's ids in one chunk (logits v, loaded by the caller); tie ranks continue from
  // ties_before (ids of earlier chunks).
  __device__ void chunk(int base, const float (&v)[kPerThread], long long& ties_before,
                        double (&kept)[kPerThread]) const {
    const int first = reader.first(base), V = reader.V;
    double w[kPerThread];
    int local_ties = 0;
    for (int j = 0; j < kPerThread; ++j) {
      w[j] = first + j < V ? weight_of(v[j], max_logit, temperature) : 0.0;
      local_ties += first + j < V && w[j] == cut.weight;
    }
    int rank = 0, chunk_ties = 0;
    if (cut.ties > 0) IntScan(s.int_scan).ExclusiveSum(local_ties, rank, chunk_ties);  // else no tie is kept
    long long tie_rank = ties_before + rank;
    for (int j = 0; j < kPerThread; ++j) {
      const bool tie = first + j < V && w[j] == cut.weight;
      kept[j] = first + j < V ? cut.kept(w[j], tie_rank) : 0.0;
      tie_rank += tie;
    }
    ties_before += chunk_ties;
  }

  // The thread's share of the kept total, and its last kept id (-1: none).
  __device__ void thread_total(double& total, int& last) const {
    total = 0.0, last = -1;
    long long ties_before = 0;
    float v[kPerThread];
    reader.load(0, v);
    for (int base = 0; base < reader.V; base += kChunk) {
      float next[kPerThread];
      reader.load(base + kChunk, next);  // in flight while this chunk's weights are made
      double kept[kPerThread];
      chunk(base, v, ties_before, kept);
      for (int j = 0; j < kPerThread; ++j)
        if (kept[j] > 0.0) total += kept[j], last = reader.first(base) + j;
      if (cut.ties > 0) __syncthreads();  // the scan's storage is reused by the next chunk
      for (int j = 0; j < kPerThread; ++j) v[j] = next[j];
    }
  }

  // The first id whose cumulative kept weight, from `carry` on, exceeds target (INT_MAX: none).
  __device__ int walk(double carry, double target) const {
    if (threadIdx.x == 0) s.found = INT_MAX;
    long long ties_before = 0;
    float v[kPerThread];
    reader.load(0, v);
    for (int base = 0; base < reader.V; base += kChunk) {
      float next[kPerThread];
      reader.load(base + kChunk, next);
      double kept[kPerThread];
      chunk(base, v, ties_before, kept);
      for (int j = 0; j < kPerThread; ++j) v[j] = next[j];
      double local = 0.0;
      for (int j = 0; j < kPerThread; ++j) local += kept[j];
      double before, chunk_sum;
      DoubleScan(s.double_scan).ExclusiveSum(local, before, chunk_sum);
      double cumulative = carry + before;
      for (int j = 0; j < kPerThread; ++j) {
        if (kept[j] == 0.0) continue;
        cumulative += kept[j];
        if (cumulative > target) {
          atomicMin(&s.found, reader.first(base) + j);
          break;
        }
      }
      __syncthreads();
      if (s.found != INT_MAX) break;
      carry += chunk_sum;
    }
    return s.found;
  }
};

// One row by one block: max, the filters' passes, the kept total, the walk.
__device__ void sample_row(const SampleRow& p, const float* logits, int V, int32_t* out, Shared& s) {
  const float* row = logits + static_cast<int64_t>(p.row) * V;
  const RowReader reader{row, V, V % kPerThread == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0};

  float max_local = -INFINITY;
  reader.for_each([&](int, float x) { max_local = fmaxf(max_local, x); });
  const float max_logit = block_reduce(max_local, [](float a, float b) { return fmaxf(a, b); });

  const RowWeights weights{reader, max_logit, p.params.temperature, filters(p, reader, max_logit, s), s};
  double total_local;
  int last_local;
  weights.thread_total(total_local, last_local);
  const double total = block_reduce(total_local, Plus());
  const int last_kept = block_reduce(last_local, [](int a, int b) { return max(a, b); });

  const int found = weights.walk(0.0, sampling_uniform(p.params.seed, p.sample_index) * total);
  if (threadIdx.x == 0) out[p.row] = found != INT_MAX ? found : max(last_kept, 0);  // as the CPU's last_kept
}

__global__ void __launch_bounds__(kThreads, 2) sample_kernel(const float* logits, int V, const SampleRow* rows,
                                                           int32_t* out) {
  pdl_prologue();
  __shared__ Shared s;
  sample_row(rows[blockIdx.x], logits, V, out, s);
}

// ---- A row over a cluster of blocks --------------------------------------------------------------------------------
namespace cg = cooperative_groups;

// What a block shows the rest of its cluster (through distributed shared memory).
struct ClusterSlot {
  float value;   // argmax: the block's best logit; sampling: the block's max
  int id;        // argmax: its id; sampling: the block's last kept id (-1: none)
  double total;  // sampling: the block's weight total
};

// The block's contiguous ids [begin, end) of a V-wide row: equal ranges, a multiple of float4 loads each (the last
// may be shorter; with a tiny V, trailing blocks are empty).
struct BlockRange {
  int begin, end;
};
__device__ BlockRange block_range(int V, unsigned rank, unsigned blocks) {
  const int per = (static_cast<int>((V + blocks - 1) / blocks) + kPerThread - 1) / kPerThread * kPerThread;
  const int begin = min(V, static_cast<int>(rank) * per);
  return {begin, min(V, begin + per)};
}
__device__ RowReader range_reader(const float* row, BlockRange range) {
  return {row + range.begin, range.end - range.begin, reinterpret_cast<uintptr_t>(row + range.begin) % 16 == 0};
}

// Grid: R clusters; cluster r takes row r.
__global__ void __launch_bounds__(kThreads, 2) argmax_cluster_kernel(const float* logits, int V, int32_t* out) {
  pdl_prologue();
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
  const int r = static_cast<int>(blockIdx.x / blocks);
  const BlockRange range = block_range(V, rank, blocks);
  float best = -INFINITY;
  int best_id = V;
  range_reader(logits + static_cast<int64_t>(r) * V, range)
      .for_each([&](int i, float x) { keep_better(best, best_id, x, range.begin + i); });
  block_best(best, best_id);
  __shared__ ClusterSlot slot;
  if (threadIdx.x == 0) slot.value = best, slot.id = best_id;
  cluster.sync();
  if (rank == 0 && threadIdx.x == 0) {
    for (unsigned b = 1; b < blocks; ++b) {
      const ClusterSlot* other = cluster.map_shared_rank(&slot, b);
      keep_better(best, best_id, other->value, other->id);
    }
    out[r] = best_id < V ? best_id : 0;  // as argmax_kernel
  }
  cluster.sync();  // no block leaves while rank 0 may still read its slot
}

// Whether a row's filters keep every token (the one-block path would skip radix_select and the cut).
__device__ bool temperature_only(const SamplingParams& params, int V) {
  return !(params.top_k > 0 && params.top_k < V) && !(params.top_p < 1.0f) && !(params.min_p > 0.0f);
}

// Grid: n clusters; cluster i takes rows[i]. Rows with filters: the cluster's first block runs sample_row.
__global__ void __launch_bounds__(kThreads, 2) sample_cluster_kernel(const float* logits, int V, const SampleRow* rows,
                                                                   int32_t* out) {
  pdl_prologue();
  __shared__ Shared s;
  __shared__ ClusterSlot slot;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank(), blocks = cluster.num_blocks();
  const SampleRow p = rows[blockIdx.x / blocks];
  if (!temperature_only(p.params, V)) {  // the same choice in every block: none reads another's slot
    if (rank == 0) sample_row(p, logits, V, out, s);
    return;
  }
  const float* row = logits + static_cast<int64_t>(p.row) * V;
  const BlockRange range = block_range(V, rank, blocks);
  const RowReader reader = range_reader(row, range);
  const int lane = threadIdx.x % 32;

  // Pass 1: the row's max, from the blocks' maxima (lane b of every warp reads block b's).
  float max_local = -INFINITY;
  reader.for_each([&](int, float x) { max_local = fmaxf(max_local, x); });
  const float block_max = block_reduce(max_local, [](float a, float b) { return fmaxf(a, b); });
  if (threadIdx.x == 0) slot.value = block_max;
  cluster.sync();
  float max_logit = lane < static_cast<int>(blocks) ? cluster.map_shared_rank(&slot, lane)->value : -INFINITY;
  for (int offset = 16; offset > 0; offset >>= 1) max_logit = fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, offset));

  // Pass 2: the block's total and last kept id; then the blocks' totals, read in rank order.
  const RowWeights weights{reader, max_logit, p.params.temperature, Cut{}, s};
  double total_local;
  int last_local;
  weights.thread_total(total_local, last_local);
  const double block_total = block_reduce(total_local, Plus());
  const int block_last = block_reduce(last_local, [](int a, int b) { return max(a, b); });
  if (threadIdx.x == 0) slot.total = block_total, slot.id = block_last >= 0 ? range.begin + block_last : -1;
  cluster.sync();  // also: every block has read the maxima
  double lane_total = 0.0;
  int lane_last = -1;
  if (lane < static_cast<int>(blocks)) {
    const ClusterSlot* other = cluster.map_shared_rank(&slot, lane);
    lane_total = other->total, lane_last = other->id;
  }
  cluster.sync();  // every block has read the totals: from here on none touches another's shared memory

  // The same sums, in the same order, in every thread of every block.
  double total = 0.0;
  int last_kept = -1;
  for (unsigned b = 0; b < blocks; ++b)
    total += __shfl_sync(0xffffffffu, lane_total, b), last_kept = max(last_kept, __shfl_sync(0xffffffffu, lane_last, b));
  const double target = sampling_uniform(p.params.seed, p.sample_index) * total;
  int crossing = -1;  // the first block whose cumulative total (including it) exceeds the target
  double before = 0.0, before_crossing = 0.0;
  for (unsigned b = 0; b < blocks; ++b) {
    const double next = before + __shfl_sync(0xffffffffu, lane_total, b);
    if (crossing < 0 && next > target) crossing = static_cast<int>(b), before_crossing = before;
    before = next;
  }
  if (crossing < 0) {  // rounding left the target at the very end (or nothing is kept): as the CPU's last_kept
    if (rank == 0 && threadIdx.x == 0) out[p.row] = max(last_kept, 0);
    return;
  }
  if (static_cast<int>(rank) != crossing) return;
  // Pass 3, in the crossing block only. If the in-block sums leave the target past the range (rounding), the
  // range's last kept id: the crossing is within rounding of its end.
  const int found = weights.walk(before_crossing, target);
  if (threadIdx.x == 0) out[p.row] = range.begin + (found != INT_MAX ? found : block_last);
}

// A launch of `clusters` clusters of `blocks` blocks of kThreads threads (with programmatic stream serialization
// where programmatic_launch_on(stream), as cuda_launch).
struct ClusterLaunch {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attributes[2] = {};
  ClusterLaunch(int clusters, int blocks, cudaStream_t stream) {
    config.gridDim = dim3(clusters * blocks), config.blockDim = dim3(kThreads), config.stream = stream;
    attributes[0].id = cudaLaunchAttributeClusterDimension;
    attributes[0].val.clusterDim.x = blocks, attributes[0].val.clusterDim.y = 1, attributes[0].val.clusterDim.z = 1;
    attributes[1] = programmatic_serialization();
    config.attrs = attributes, config.numAttrs = programmatic_launch_on(stream) ? 2 : 1;
  }
  ClusterLaunch(const ClusterLaunch&) = delete;  // config points at attributes
};

// Clusters of more than 8 blocks are a non-portable size: allowed per kernel, and possible only where a GPC holds
// them. How many clusters of `blocks` blocks the kernel keeps resident at once (two blocks an SM at most, each
// cluster within one GPC).
template <typename Kernel>
int resident_clusters(Kernel kernel, int blocks) {
  MOESERVE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  const ClusterLaunch launch(1, blocks, nullptr);
  int clusters = 0;
  MOESERVE_CUDA_CHECK(cudaOccupancyMaxActiveClusters(&clusters, kernel, &launch.config));
  return clusters;
}

constexpr int kClusterSizes = 4;  // 2, 4, 8, 16 blocks

// i for blocks = 2 << i, or -1 (sources compile as C++17 here: no <bit>).
int cluster_size_index(int blocks) {
  for (int i = 0; i < kClusterSizes; ++i)
    if (blocks == 2 << i) return i;
  return -1;
}

// Resident clusters of 2 << i blocks for both kernels, per device (as device_multiprocessors).
const std::array<int, kClusterSizes>& cluster_residency() {
  thread_local std::vector<std::array<int, kClusterSizes>> residency;
  int device = 0;
  MOESERVE_CUDA_CHECK(cudaGetDevice(&device));
  if (static_cast<int>(residency.size()) <= device) residency.resize(device + 1, {-1});  // -1: not asked yet
  std::array<int, kClusterSizes>& clusters = residency[device];
  if (clusters[0] < 0)
    for (int i = 0; i < kClusterSizes; ++i)
      clusters[i] = std::min(resident_clusters(argmax_cluster_kernel, 2 << i),
                             resident_clusters(sample_cluster_kernel, 2 << i));
  return clusters;
}

template <typename Kernel, typename... Args>
void launch_clusters(cudaStream_t stream, Kernel kernel, int clusters, int blocks, Args... args) {
  MOESERVE_CHECK(sampling_resident_clusters(blocks) > 0,
                 "sampling: {} blocks a row (a cluster of 2, 4, 8 or 16 blocks the device holds)", blocks);
  const ClusterLaunch launch(clusters, blocks, stream);
  MOESERVE_CUDA_CHECK(cudaLaunchKernelEx(&launch.config, kernel, args...));
}

}  // namespace

int sampling_cluster_blocks(int rows) {
  const auto& residency = cluster_residency();
  int blocks = 1;
  for (int i = 0; i < kClusterSizes; ++i)
    if (rows > 0 && rows <= residency[i]) blocks = 2 << i;
  return blocks;
}

int sampling_resident_clusters(int blocks) {
  const int i = cluster_size_index(blocks);
  return i >= 0 ? cluster_residency()[i] : 0;
}

void launch_argmax(cudaStream_t stream, const float* logits, int R, int V, int32_t* out) {
  launch_argmax_split(stream, logits, R, V, out, sampling_cluster_blocks(R));
}

void launch_argmax_split(cudaStream_t stream, const float* logits, int R, int V, int32_t* out, int blocks) {
  if (R == 0) return;
  if (blocks == 1) {
    MOESERVE_CUDA_CHECK(cuda_launch(argmax_kernel, R, 1024, 0, stream, logits, V, out));
    return;
  }
  launch_clusters(stream, argmax_cluster_kernel, R, blocks, logits, V, out);
}

void launch_sample(cudaStream_t stream, const float* logits, int V, const SampleRow* rows, int n, int32_t* out) {
  launch_sample_split(stream, logits, V, rows, n, out, sampling_cluster_blocks(n));
}

void launch_sample_split(cudaStream_t stream, const float* logits, int V, const SampleRow* rows, int n, int32_t* out,
                         int blocks) {
  if (n == 0) return;
  if (blocks == 1) {
    MOESERVE_CUDA_CHECK(cuda_launch(sample_kernel, n, kThreads, 0, stream, logits, V, rows, out));
    return;
  }
  launch_clusters(stream, sample_cluster_kernel, n, blocks, logits, V, rows, out);
}

}  // namespace moeserve::cuda
