// Multi-head latent attention in DeepSeek's absorbed form over the paged latent cache (mla_layout.h): for each query
// token and head, scores scale * (q~ . c + q_pe . k_pe) over the latents of positions 0 .. its own, softmax in fp32,
// o~ = sum p c. MQA over the latent: every head of a token reads the same rows.
//
// Version 1, correctness first, on CUDA cores in fp32 (no tensor cores yet). Grid (query token, split): a split is
// split_keys consecutive positions (16 to 64). The block copies its split's latent rows from the cache into shared
// memory once (16-byte loads along whole rows; bf16 kept as is, fp8 e4m3 widened to bf16 exactly, its scale applied
// in fp32 afterwards), then walks the heads kMlaHeadsPerPass at a time over those rows: scores (one dot product of
// the row's 576 values per (head, key)), the split's softmax (one warp per head: the whole split is in shared
// memory, so its max is exact and no online rescaling is needed), and the output columns (a thread per column
// pair, all the pass's heads). Each latent row is read from memory once per query token, for all heads. Each
// (token, head, split) writes a partial (max, sum, output) and the merge kernel combines a token's splits:
// o = sum_s 2^(m_s - m) O_s / sum_s 2^(m_s - m) l_s.
//
// What version 1 costs beyond the latent rows (batch 1 @ 2k on V3, 128 splits of 16 keys): each split block reads
// the token's whole query (128 x 576 fp32, 295 KB: 38 MB from L2 in all) and writes a partial of 128 x 514 floats
// (34 MB, read again by the merge), against 2.4 MB of latent rows; and its dot products are shared-memory bound
// (a 32-bit row load and a broadcast 64-bit query load per 2 FMAs).
// What a tensor-core version changes: scores and outputs are GEMMs of [heads, 576] x [576, keys] and
// [heads, keys] x [keys, 512] per token (FlashMLA runs them on wgmma with the heads as M). At V3's 128 heads a
// decode token costs 2 x 128 x (576 + 512) FLOP per cached row of 1,152 bf16 bytes, 242 FLOP a byte, past the
// H200's ridge (~790 TFLOP/s over 4.28 TB/s, ~185): compute-bound even on tensor cores, and CUDA-core fp32
// (~67 TFLOP/s peak) is 12 times further from the floor.
// Version 2 (mla_decode_mma.cu) does that with mma.sync, 16 heads a warp, writing the same partials for the merge
// here; launch_mla_decode runs either (MOESERVE_MLA_DECODE, kernels.h), and the tests check both against the CPU.
// CPU reference: cpu::MlaAttention's absorbed form (attend_absorbed), between its two projections.
#include <cmath>
#include <cstdlib>

#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"
#include "runner/cuda/mla_decode.cuh"

namespace moeserve::cuda {
namespace {

constexpr int kThreads = kMlaDecodeThreads;
constexpr int kHeads = kMlaHeadsPerPass;
constexpr int kMergeThreads = 128;

template <typename CacheElem>
__global__ void __launch_bounds__(kThreads) mla_decode_kernel(MlaDecodeParams p, StepView step,
                                                             MlaDecodeScratch scratch) {
  pdl_prologue();
  constexpr bool kFp8 = sizeof(CacheElem) == 1;
  constexpr int kPerCopy = 16 / static_cast<int>(sizeof(CacheElem));  // elements per 16-byte copy
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ bool row_ok[kMlaMaxSplitKeys];

  const MlaCacheShape shape = p.cache.shape;
  const int L = shape.kv_lora_rank, R = shape.rope_dim, W = L + R;
  const int keys_per_split = scratch.split_keys;
  const int t = blockIdx.x, split = blockIdx.y;
  MlaSplit range;
  if (!mla_split(step, scratch, t, split, range)) return;
  const int seq = range.seq, k0 = range.k0, n = range.n;

  const int row_words = (W + 2) / 2;  // bf16 pairs per shared row (odd: conflict-free columns)
  const int q_stride = W + 4;
  uint32_t* rows = reinterpret_cast<uint32_t*>(smem);                                   // [split_keys][row_words]
  float* q_s = reinterpret_cast<float*>(smem + keys_per_split * row_words * 4);          // [kHeads][q_stride]
  float* s_s = q_s + kHeads * q_stride;                                                  // [kHeads][split_keys]

  // The split's rows, once for all heads.
  const int32_t* table = step_block_table(step, seq, p.group);
  const CacheElem* cache = static_cast<const CacheElem*>(p.cache.base);
  const int copies = W / kPerCopy;
  for (int i = threadIdx.x; i < n * copies; i += kThreads) {
    const int r = i / copies, c = i % copies;
    const int64_t offset = mla_position_offset(shape, table, p.layer, k0 + r);
    if (c == 0) row_ok[r] = offset >= 0;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (offset >= 0) v = *reinterpret_cast<const uint4*>(cache + offset + c * kPerCopy);
    uint32_t* dst = rows + r * row_words + c * (kPerCopy / 2);
    if constexpr (kFp8) {
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        dst[2 * k] = e4m3x2_to_bf16x2(words[k] & 0xffffu);
        dst[2 * k + 1] = e4m3x2_to_bf16x2(words[k] >> 16);
      }
    } else {
      dst[0] = v.x;
      dst[1] = v.y;
      dst[2] = v.z;
      dst[3] = v.w;
    }
  }

  // fp8 rows hold stored values: the layer's scale joins the score scale and the output.
  const float q_factor = p.scale * kLog2e * (kFp8 ? p.kv_scale : 1.0f);
  const float out_factor = kFp8 ? p.kv_scale : 1.0f;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  auto partial_of = [&](int head) { return mla_partial(p, scratch, t, head, split); };
  for (int h0 = 0; h0 < p.heads; h0 += kHeads) {
    const int nh = min(kHeads, p.heads - h0);
    __syncthreads();  // the rows are in (first pass); q_s and s_s are free (later passes)
    for (int i = threadIdx.x; i < nh * W; i += kThreads) {
      const int h = i / W, d = i % W;
      const int64_t qh = static_cast<int64_t>(t) * p.heads + h0 + h;
      const float v = d < L ? p.q_latent[qh * L + d] : p.q_rope[qh * R + (d - L)];
      q_s[h * q_stride + d] = v * q_factor;
    }
    __syncthreads();

    // Scores in the log2 domain: the row's latent and k_pe against q~ and q_pe in one dot product.
    for (int i = threadIdx.x; i < nh * keys_per_split; i += kThreads) {
      const int h = i / keys_per_split, key = i % keys_per_split;
      if (key >= n) continue;
      float s = -INFINITY;
      if (row_ok[key]) {
        const uint32_t* row = rows + key * row_words;
        const float* q = q_s + h * q_stride;
        float even = 0.0f, odd = 0.0f;
        for (int w = 0; w < W / 2; ++w) {
          const uint32_t word = row[w];
          const float2 qq = *reinterpret_cast<const float2*>(q + 2 * w);
          even = fmaf(qq.x, bf16_low(word), even);
          odd = fmaf(qq.y, bf16_high(word), odd);
        }
        s = even + odd;
      }
      s_s[h * keys_per_split + key] = s;
    }
    __syncthreads();

    // The split's softmax numerators, one warp per head; max and sum go to the partial.
    if (warp < nh) {
      float* s = s_s + warp * keys_per_split;
      float m = -INFINITY;
      for (int key = lane; key < n; key += 32) m = fmaxf(m, s[key]);
      m = warp_max(m);
      float l = 0.0f;
      for (int key = lane; key < n; key += 32) {
        const float e = m == -INFINITY ? 0.0f : exp2f(s[key] - m);
        s[key] = e;
        l += e;
      }
      l = warp_sum(l);
      if (lane == 0) {
        float* part = partial_of(h0 + warp);
        part[0] = m;
        part[1] = l;
      }
    }
    __syncthreads();

    // Output columns 2cp, 2cp + 1 of the latent for every head of the pass.
    for (int cp = threadIdx.x; cp < L / 2; cp += kThreads) {
      float acc[kHeads][2] = {};
      for (int key = 0; key < n; ++key) {
        const uint32_t word = rows[key * row_words + cp];
        const float c0 = bf16_low(word), c1 = bf16_high(word);
#pragma unroll
        for (int h = 0; h < kHeads; ++h) {
          if (h < nh) {
            const float pj = s_s[h * keys_per_split + key];
            acc[h][0] = fmaf(pj, c0, acc[h][0]);
            acc[h][1] = fmaf(pj, c1, acc[h][1]);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < kHeads; ++h)
        if (h < nh)
          *reinterpret_cast<float2*>(partial_of(h0 + h) + 2 + 2 * cp) =
              make_float2(acc[h][0] * out_factor, acc[h][1] * out_factor);
    }
  }
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < warps; ++w) m = fmaxf(m, partial[w]);
  return m;
}

// One block per (token, head): the splits' weights 2^(m_s - m) into shared memory, then each thread its columns.
__global__ void __launch_bounds__(kMergeThreads) mla_merge_kernel(MlaDecodeParams p, StepView step,
                                                                 MlaDecodeScratch scratch) {
  pdl_prologue();
  extern __shared__ float weight[];  // [mla_merge_weight_floats(max_splits)]: the last group of four padded
  const int t = blockIdx.x, head = blockIdx.y;
  const int L = p.cache.shape.kv_lora_rank, stride = mla_partial_stride(L);
  const int splits = mla_decode_splits(mla_last_position(step, t), scratch.split_keys);
  if (splits > scratch.max_splits) __trap();  // weight[] and the partials are sized for max_splits
  const float* part = mla_partial(p, scratch, t, head, 0);
  float m = -INFINITY;
  for (int s = threadIdx.x; s < splits; s += kMergeThreads) m = fmaxf(m, part[s * stride]);
  m = block_max(m);
  float l = 0.0f;
  // The pad up to the group's end gets weight 0, so a vectorised tail read of weight[] reads defined values.
  for (int s = threadIdx.x; s < mla_merge_weight_floats(splits); s += kMergeThreads) {
    float w = 0.0f;
    if (s < splits) {
      const float m_s = part[s * stride];
      w = m_s == -INFINITY ? 0.0f : exp2f(m_s - m);
      l += part[s * stride + 1] * w;
    }
    weight[s] = w;
  }
  l = block_sum(l);  // its barriers also publish weight[]
  const float inv = 1.0f / l;
  float* out = p.out + (static_cast<int64_t>(t) * p.heads + head) * L;
  for (int c = threadIdx.x; c < L; c += kMergeThreads) {
    float o = 0.0f;
    for (int s = 0; s < splits; ++s) o = fmaf(weight[s], part[s * stride + 2 + c], o);
    out[c] = o * inv;
  }
}

template <typename CacheElem>
void launch_typed(cudaStream_t stream, const MlaDecodeParams& p, const StepView& step, const MlaDecodeScratch& scratch) {
  const int bytes = mla_decode_shared_bytes(mla_row_width(p.cache.shape), scratch.split_keys);
  allow_dynamic_shared_memory(reinterpret_cast<const void*>(&mla_decode_kernel<CacheElem>), bytes);
  MOESERVE_CUDA_CHECK(cuda_launch(mla_decode_kernel<CacheElem>, dim3(step.num_tokens, scratch.max_splits), kThreads,
                                  bytes, stream, p, step, scratch));
}

}  // namespace

MlaDecodeVersion mla_decode_version() {
  // A bad value throws out of the initialisation, so every call fails alike until the variable is fixed.
  static const MlaDecodeVersion version = [] {
    MlaDecodeVersion chosen = kMlaDecodeDefault;
    const char* value = std::getenv("MOESERVE_MLA_DECODE");
    if (value != nullptr && *value != '\0' && !mla_decode_version_named(value, chosen))
      fail_cuda("MOESERVE_MLA_DECODE", "expected v1 or v2", __FILE__, __LINE__);
    return chosen;
  }();
  return version;
}

void launch_mla_decode(cudaStream_t stream, const MlaDecodeParams& params, const StepView& step,
                       const MlaDecodeScratch& scratch, MlaDecodeVersion version) {
  if (step.num_tokens == 0) return;
  if (step.tree_masks != nullptr) fail_cuda("mla_decode", "tree steps are not supported", __FILE__, __LINE__);
  if (params.cache.dtype == KvDtype::f32)
    fail_cuda("mla_decode", "the latent cache must be bf16 or fp8 e4m3", __FILE__, __LINE__);
  const size_t bytes = kv_element_bytes(params.cache.dtype);
  const std::string error =
      mla_shape_error(params.cache.shape, static_cast<int>(bytes), params.heads, scratch.split_keys, version);
  if (!error.empty()) fail_cuda("mla_decode", error.c_str(), __FILE__, __LINE__);
  const std::string merge_error = mla_merge_error(scratch.max_splits);
  if (!merge_error.empty()) fail_cuda("mla_decode", merge_error.c_str(), __FILE__, __LINE__);
  const int merge_bytes = mla_merge_shared_bytes(scratch.max_splits);
  if (version == MlaDecodeVersion::v2)
    launch_mla_decode_mma(stream, params, step, scratch);
  else if (params.cache.dtype == KvDtype::bf16)
    launch_typed<bf16>(stream, params, step, scratch);
  else
    launch_typed<fp8>(stream, params, step, scratch);
  MOESERVE_CUDA_CHECK(cuda_launch(mla_merge_kernel, dim3(step.num_tokens, params.heads), kMergeThreads, merge_bytes,
                                  stream, params, step, scratch));
}

}  // namespace moeserve::cuda
