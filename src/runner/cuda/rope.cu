// YaRN RoPE (half split: pairs (i, i + head_dim/2), cos and sin scaled by the concentration) applied to the q
// and k heads of the fused QKV projection; q goes to its own buffer, k and v into the paged KV cache at each
// token's KV slot (its position, except in a tree step: token_slot), as the cache's element type (fp8: divided
// by the layer's K or V scale). One thread per rotary pair of a head; grid (token, pair group). For decode steps of
// at most 4 tokens (bf16) the QKV projection itself can carry it (launch_qkv_rope_kv_write, below). The rows are
// fp32, or bf16 (RopeParams::qkv_bf16: the FP8 product's output), plus the product's bias when it could not add it.
// CPU reference: cpu::apply_rope (fp32 angle position * inv_freq, as transformers computes it).
#include <cstdlib>
#include <string>

#include "runner/cuda/dense_gemv.cuh"
#include "runner/cuda/kv_dtype.cuh"
#include "runner/cuda/launch.cuh"

namespace moeserve::cuda {
namespace {

// The rotation of pair i of a q or k head of token t (every launch's arithmetic, so the kernels agree to the bit).
__device__ __forceinline__ void rope_rotate(const RopeParams& p, const StepView& step, int t, int i, float x1, float x2,
                                            float& out1, float& out2) {
  float sine, cosine;
  sincosf(static_cast<float>(step.positions[t]) * p.inv_freq[i], &sine, &cosine);
  cosine *= p.concentration;
  sine *= p.concentration;
  out1 = x1 * cosine - x2 * sine;
  out2 = x2 * cosine + x1 * sine;
}

// Where head h (a k or v head) of token t goes in the KV cache: the element offset of its row (-1: no block) and
// the factor a value is stored times (fp8: 1 / the layer's K or V scale).
struct KvRow {
  int64_t offset;
  float inv_scale;
};
__device__ __forceinline__ KvRow kv_row_of(const RopeParams& p, const StepView& step, int t, int h) {
  const int seq = step.token_seq[t];
  const int which = h < p.heads + p.kv_heads ? 0 : 1;
  const int kv_head = h - p.heads - which * p.kv_heads;
  return {kv_offset(p.kv, step, seq, p.group, p.slot, which, kv_head, token_slot(step, t, seq)),
          1.0f / (which == 0 ? p.k_scale : p.v_scale)};
}

// Pair i of head h of token t (x1: value i, x2: value i + half): rotated for q and k heads, then q into q_out and
// k and v into the KV cache.
template <typename Elem, typename KvElem>
__device__ __forceinline__ void rope_store_pair(const RopeParams& p, const StepView& step, int t, int h, int i,
                                                float x1, float x2) {
  const int half = p.head_dim / 2;
  float out1 = x1, out2 = x2;
  if (h < p.heads + p.kv_heads) rope_rotate(p, step, t, i, x1, x2, out1, out2);
  if (h < p.heads) {
    Elem* dst = static_cast<Elem*>(p.q_out) + (static_cast<int64_t>(t) * p.heads + h) * p.head_dim;
    dst[i] = from_float<Elem>(out1);
    dst[i + half] = from_float<Elem>(out2);
    return;
  }
  const KvRow kv = kv_row_of(p, step, t, h);
  if (kv.offset < 0) return;  // the host checked every written slot has a block
  KvElem* cache = static_cast<KvElem*>(p.kv.base) + kv.offset;
  store_kv(cache + i, out1, kv.inv_scale);
  store_kv(cache + i + half, out2, kv.inv_scale);
}

template <typename Elem, typename KvElem>
__global__ void rope_kv_write_kernel(RopeParams p, StepView step) {
  pdl_prologue();
  const int t = blockIdx.x;
  const int D = p.head_dim, half = D / 2;
  const int all_heads = p.heads + 2 * p.kv_heads;
  const int64_t row = static_cast<int64_t>(t) * all_heads * D;
  const int item = blockIdx.y * blockDim.x + threadIdx.x;
  if (item < all_heads * half) {
    const int h = item / half, i = item % half;
    float v1, v2;
    if (p.qkv_bf16 != nullptr) {
      const bf16* rows = static_cast<const bf16*>(p.qkv_bf16) + row;
      v1 = __bfloat162float(rows[h * D + i]), v2 = __bfloat162float(rows[h * D + i + half]);
    } else {
      v1 = p.qkv[row + h * D + i], v2 = p.qkv[row + h * D + i + half];
    }
    if (p.qkv_bias != nullptr) v1 += p.qkv_bias[h * D + i], v2 += p.qkv_bias[h * D + i + half];
    rope_store_pair<Elem, KvElem>(p, step, t, h, i, v1, v2);
  }
}

// Version 2 of the kernel above: kVecPairs consecutive pairs i0 .. i0 + 3 of head h of token t a thread, each side
// (values i0.., i0 + half..) read and written as one 8- or 16-byte access instead of four 2- or 4-byte ones, and the
// KV slot's offset found once for the four (version 1, one pair a thread, ran at 55% of its byte floor in the
// prefill step: 5.4 ms of an 8k prompt's 210 on an H100). The same arithmetic per pair (rope_rotate). For head
// sizes that are a multiple of 2 x kVecPairs. Not yet run on a GPU (no device time was left the session it was
// written): launch_rope_kv_write runs it when asked (version 2, or MOESERVE_ROPE_VERSION=2), version 1 otherwise.
constexpr int kVecPairs = 4;

template <typename T>
__device__ __forceinline__ void load4(const T* src, float (&v)[kVecPairs]);
template <>
__device__ __forceinline__ void load4<float>(const float* src, float (&v)[kVecPairs]) {
  const float4 a = *reinterpret_cast<const float4*>(src);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
template <>
__device__ __forceinline__ void load4<bf16>(const bf16* src, float (&v)[kVecPairs]) {
  const uint2 a = *reinterpret_cast<const uint2*>(src);
  v[0] = __uint_as_float(a.x << 16), v[1] = __uint_as_float(a.x & 0xffff0000u);
  v[2] = __uint_as_float(a.y << 16), v[3] = __uint_as_float(a.y & 0xffff0000u);
}

// Four consecutive values as the destination's type stores them (store_kv's and from_float's roundings).
__device__ __forceinline__ void store4(float* dst, const float (&v)[kVecPairs], float) {
  *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(bf16* dst, const float (&v)[kVecPairs], float) {
  *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
}
__device__ __forceinline__ void store4(fp8* dst, const float (&v)[kVecPairs], float inv_scale) {
  uint32_t word = 0;
#pragma unroll
  for (int k = 0; k < kVecPairs; ++k)
    word |= static_cast<uint32_t>(__nv_cvt_float_to_fp8(v[k] * inv_scale, __NV_SATFINITE, __NV_E4M3)) << (8 * k);
  *reinterpret_cast<uint32_t*>(dst) = word;
}

template <typename Elem, typename KvElem>
__global__ void rope_kv_write_vec_kernel(RopeParams p, StepView step) {
  pdl_prologue();
  const int t = blockIdx.x;
  const int D = p.head_dim, half = D / 2, runs = half / kVecPairs;
  const int all_heads = p.heads + 2 * p.kv_heads;
  const int64_t row = static_cast<int64_t>(t) * all_heads * D;
  const int item = blockIdx.y * blockDim.x + threadIdx.x;
  if (item >= all_heads * runs) return;
  const int h = item / runs, i0 = (item % runs) * kVecPairs;
  float x1[kVecPairs], x2[kVecPairs];
  if (p.qkv_bf16 != nullptr) {
    const bf16* rows = static_cast<const bf16*>(p.qkv_bf16) + row + h * D + i0;
    load4(rows, x1);
    load4(rows + half, x2);
  } else {
    const float* rows = p.qkv + row + h * D + i0;
    load4(rows, x1);
    load4(rows + half, x2);
  }
  if (p.qkv_bias != nullptr)
#pragma unroll
    for (int k = 0; k < kVecPairs; ++k) x1[k] += p.qkv_bias[h * D + i0 + k], x2[k] += p.qkv_bias[h * D + i0 + k + half];
  float out1[kVecPairs], out2[kVecPairs];
#pragma unroll
  for (int k = 0; k < kVecPairs; ++k) {
    out1[k] = x1[k], out2[k] = x2[k];
    if (h < p.heads + p.kv_heads) rope_rotate(p, step, t, i0 + k, x1[k], x2[k], out1[k], out2[k]);
  }
  if (h < p.heads) {
    Elem* dst = static_cast<Elem*>(p.q_out) + (static_cast<int64_t>(t) * p.heads + h) * D + i0;
    store4(dst, out1, 1.0f);
    store4(dst + half, out2, 1.0f);
    return;
  }
  const KvRow kv = kv_row_of(p, step, t, h);
  if (kv.offset < 0) return;  // the host checked every written slot has a block
  KvElem* cache = static_cast<KvElem*>(p.kv.base) + kv.offset + i0;
  store4(cache, out1, kv.inv_scale);
  store4(cache + half, out2, kv.inv_scale);
}

int rope_version_from_env() {
  static const int version = [] {
    const char* value = std::getenv("MOESERVE_ROPE_VERSION");
    return value != nullptr && std::string(value) == "2" ? 2 : 1;
  }();
  return version;
}

// The QKV projection of kRows decode tokens (dense_gemv.cuh's GEMV: the same sums, bit for bit) with RoPE and the KV
// write in its epilogue, one launch instead of two and no fp32 QKV rows through global memory. A block's 8 warps
// own kPairs rotary pairs of one head: warp w computes output i0 + w of the head's first half (w < kPairs) or
// i0 + w - kPairs of its second half, the totals meet in shared memory, and thread (row, pair) rotates and stores.
constexpr int kFusedPairs = kDenseGemvWarps / 2;

template <typename KvElem, int kRows>
__global__ void __launch_bounds__(kDenseGemvWarps * 32)
    qkv_rope_kv_write_kernel(const bf16* x, int K, const bf16* W, const float* bias, RopeParams p, StepView step) {
  pdl_prologue();
  __shared__ __align__(16) bf16 x_s[kRows][kDenseGemvMaxK];
  __shared__ float out_s[kRows][kDenseGemvWarps];
  dense_gemv_load_x<kRows>(x, K, x_s);
  __syncthreads();
  const int D = p.head_dim, half = D / 2, groups = half / kFusedPairs;
  const int h = blockIdx.x / groups, i0 = (blockIdx.x % groups) * kFusedPairs;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n = h * D + i0 + warp % kFusedPairs + (warp / kFusedPairs) * half;
  float acc[kRows];
  dense_gemv_row<kRows>(x_s, W + static_cast<int64_t>(n) * K, K, lane, acc);
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < kRows; ++r) out_s[r][warp] = acc[r] + (bias != nullptr ? bias[n] : 0.0f);
  __syncthreads();
  const int r = threadIdx.x / kFusedPairs, j = threadIdx.x % kFusedPairs;
  if (r < kRows && r < step.num_tokens)
    rope_store_pair<bf16, KvElem>(p, step, r, h, i0 + j, out_s[r][j], out_s[r][kFusedPairs + j]);
}

template <typename KvElem>
void launch_fused(cudaStream_t stream, const bf16* x, int rows, int K, const bf16* W, const float* bias,
                  const RopeParams& p, const StepView& step) {
  const int blocks = (p.heads + 2 * p.kv_heads) * (p.head_dim / 2 / kFusedPairs);
  const int threads = kDenseGemvWarps * 32;
  switch (rows) {
    case 1:
      MOESERVE_CUDA_CHECK(cuda_launch(qkv_rope_kv_write_kernel<KvElem, 1>, blocks, threads, 0, stream, x, K, W, bias, p, step));
      break;
    case 2:
      MOESERVE_CUDA_CHECK(cuda_launch(qkv_rope_kv_write_kernel<KvElem, 2>, blocks, threads, 0, stream, x, K, W, bias, p, step));
      break;
    case 3:
      MOESERVE_CUDA_CHECK(cuda_launch(qkv_rope_kv_write_kernel<KvElem, 3>, blocks, threads, 0, stream, x, K, W, bias, p, step));
      break;
    default:
      MOESERVE_CUDA_CHECK(cuda_launch(qkv_rope_kv_write_kernel<KvElem, 4>, blocks, threads, 0, stream, x, K, W, bias, p, step));
      break;
  }
}

}  // namespace

void launch_rope_kv_write(cudaStream_t stream, Precision type, const RopeParams& params, const StepView& step,
                          int version) {
  if (step.num_tokens == 0) return;
  const KvDtype kv = params.kv.dtype;
  const int all_heads = params.heads + 2 * params.kv_heads;
  if (version == 0) version = rope_version_from_env();
  if (version == 2 && params.head_dim % (2 * kVecPairs) == 0) {
    const dim3 grid(step.num_tokens, ceil_div(all_heads * params.head_dim / 2 / kVecPairs, 128));
    if (type == Precision::f32 && kv == KvDtype::f32)
      MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_vec_kernel<float, float>, grid, 128, 0, stream, params, step));
    else if (type == Precision::bf16 && kv == KvDtype::bf16)
      MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_vec_kernel<bf16, bf16>, grid, 128, 0, stream, params, step));
    else if (type == Precision::bf16 && kv == KvDtype::fp8_e4m3)
      MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_vec_kernel<bf16, fp8>, grid, 128, 0, stream, params, step));
    else
      fail_cuda("rope_kv_write", "KV cache type does not go with the precision (f32: f32; bf16: bf16 or fp8)",
                __FILE__, __LINE__);
    return;
  }
  const dim3 grid(step.num_tokens, ceil_div(all_heads * params.head_dim / 2, 256));
  if (type == Precision::f32 && kv == KvDtype::f32)
    MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_kernel<float, float>, grid, 256, 0, stream, params, step));
  else if (type == Precision::bf16 && kv == KvDtype::bf16)
    MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_kernel<bf16, bf16>, grid, 256, 0, stream, params, step));
  else if (type == Precision::bf16 && kv == KvDtype::fp8_e4m3)
    MOESERVE_CUDA_CHECK(cuda_launch(rope_kv_write_kernel<bf16, fp8>, grid, 256, 0, stream, params, step));
  else
    fail_cuda("rope_kv_write", "KV cache type does not go with the precision (f32: f32; bf16: bf16 or fp8)", __FILE__,
              __LINE__);
}

bool qkv_rope_fused_supported(Precision type, int rows, int64_t in_features, const RopeParams& params) {
  const KvDtype kv = params.kv.dtype;
  return type == Precision::bf16 && (kv == KvDtype::bf16 || kv == KvDtype::fp8_e4m3) &&
         dense_gemv_supported(rows, in_features) && params.head_dim % (2 * kFusedPairs) == 0;
}

void launch_qkv_rope_kv_write(cudaStream_t stream, Precision type, const void* x, int rows, const void* weight,
                              int64_t in_features, const float* bias, const RopeParams& params, const StepView& step) {
  if (!qkv_rope_fused_supported(type, rows, in_features, params))
    fail_cuda("qkv_rope_kv_write", "bf16, a bf16 or fp8 KV cache, at most 4 rows of at most 4096 inputs (a multiple "
              "of 8) and a head size that is a multiple of 8", __FILE__, __LINE__);
  if (step.num_tokens == 0) return;
  const auto* xb = static_cast<const bf16*>(x);
  const auto* wb = static_cast<const bf16*>(weight);
  const int K = static_cast<int>(in_features);
  if (params.kv.dtype == KvDtype::bf16)
    launch_fused<bf16>(stream, xb, rows, K, wb, bias, params, step);
  else
    launch_fused<fp8>(stream, xb, rows, K, wb, bias, params, step);
}

}  // namespace moeserve::cuda
