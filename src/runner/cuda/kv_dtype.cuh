// The KV cache's element types on the device: writing a value (fp8 e4m3: divided by the layer's scale, rounded
// to nearest and saturated to +-448, as vLLM's fp8 KV cache stores it) and turning stored pairs back into
// 16-bit pairs for the tensor cores. e4m3 values (3 mantissa bits, exponents 2^-9..2^8) are exact in fp16, so
// the hardware conversion (cvt.rn.f16x2.e4m3x2, sm_89+) loses nothing; the scale is applied in fp32 afterwards.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "runner/cuda/device_common.cuh"

namespace moeserve::cuda {

using fp8 = __nv_fp8_e4m3;

__device__ __forceinline__ void store_kv(float* dst, float v, float) { *dst = v; }
__device__ __forceinline__ void store_kv(bf16* dst, float v, float) { *dst = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_kv(fp8* dst, float v, float inv_scale) {
  dst->__x = __nv_cvt_float_to_fp8(v * inv_scale, __NV_SATFINITE, __NV_E4M3);
}

// Two e4m3 values (low byte first) as an fp16 pair, exactly.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t two_bytes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_bytes & 0xffffu), __NV_E4M3);
  return static_cast<uint32_t>(h.x) | static_cast<uint32_t>(h.y) << 16;
}

// Two e4m3 values (low byte first) as a bf16 pair, exactly (every e4m3 value is a bf16 value).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two_bytes) {
  const uint32_t h = e4m3x2_to_f16x2(two_bytes);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_bf16x2(f.x, f.y);
}

// A bf16 pair as an fp16 pair: exact for magnitudes in [2^-14, 65504] (fp16 has more mantissa bits), saturated
// to +-65504 beyond (an infinity would turn a whole score row into NaN), NaN kept.
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t word) {
  constexpr float kMax = 65504.0f;
  const float lo = __uint_as_float(word << 16), hi = __uint_as_float(word & 0xffff0000u);
  const __half2 h = __floats2half2_rn(lo != lo ? lo : fminf(fmaxf(lo, -kMax), kMax),
                                      hi != hi ? hi : fminf(fmaxf(hi, -kMax), kMax));
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

}  // namespace moeserve::cuda
