// Dot products of an fp32 activation row with a weight row stored as fp32, bf16 or MXFP4, in one canonical
// order: element k accumulates into lane k % 16 by fused multiply-add, and the 16 lanes are summed in a fixed
// tree. Every lane's sequence of operations is fixed whatever the compiler vectorises, so a row gives the same
// bits for any batch, any path (weights converted first or on the fly) and any thread split. The engine's "a
// request gives the same tokens in any batch" guarantee rests on this.
#pragma once

#include <cmath>
#include <cstdint>

#include "model/mxfp4.h"
#include "util/bfloat16.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace moeserve::cpu {

inline constexpr int kLanes = 16;

inline float sum_lanes(const float* acc) {
  float s8[8], s4[4];
  for (int i = 0; i < 8; ++i) s8[i] = acc[i] + acc[i + 8];
  for (int i = 0; i < 4; ++i) s4[i] = s8[i] + s8[i + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

inline float dot_f32(const float* __restrict x, const float* __restrict w, int64_t K) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(x[k + l], w[k + l], acc[l]);
  for (int l = 0; k + l < K; ++l) acc[l] = std::fma(x[k + l], w[k + l], acc[l]);
  return sum_lanes(acc);
}

// Same bits as dot_f32 over the converted row (bf16 -> fp32 is exact).
inline float dot_bf16(const float* __restrict x, const uint16_t* __restrict w, int64_t K) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(x[k + l], bf16_to_float(w[k + l]), acc[l]);
  for (int l = 0; k + l < K; ++l) acc[l] = std::fma(x[k + l], bf16_to_float(w[k + l]), acc[l]);
  return sum_lanes(acc);
}

// MXFP4 rows: in a block of 32, lane j takes elements 2j and 2j + 1: t = x[2j] v[2j]; t = fma(x[2j+1], v[2j+1], t);
// acc[j] = fma(t, scale, acc[j]). The activation is passed split into its even and odd elements.
struct Mxfp4Activation {
  const float* even;  // x[0], x[2], ...  (K / 2)
  const float* odd;   // x[1], x[3], ...
};

// A row's values expanded once (for many tokens): even and odd elements of every block, and the block scales.
struct Mxfp4ExpandedRow {
  const float* even;    // K / 2
  const float* odd;     // K / 2
  const float* scales;  // K / 32
};

inline void expand_mxfp4_row(const uint8_t* blocks, const uint8_t* scales, int64_t K, float* even, float* odd,
                             float* block_scales) {
  for (int64_t b = 0; b < K / kMxfp4BlockSize; ++b) {
    block_scales[b] = e8m0_to_float(scales[b]);
    for (int j = 0; j < kMxfp4BlockBytes; ++j) {
      const uint8_t byte = blocks[b * kMxfp4BlockBytes + j];
      even[b * 16 + j] = kFp4Values[byte & 0x0F];
      odd[b * 16 + j] = kFp4Values[byte >> 4];
    }
  }
}

inline float dot_mxfp4_expanded(const Mxfp4Activation& x, const Mxfp4ExpandedRow& w, int64_t K) {
  float acc[kLanes] = {};
  for (int64_t b = 0; b < K / kMxfp4BlockSize; ++b) {
    const float s = w.scales[b];
    const float* xe = x.even + b * 16;
    const float* xo = x.odd + b * 16;
    const float* ve = w.even + b * 16;
    const float* vo = w.odd + b * 16;
    for (int l = 0; l < kLanes; ++l) {
      float t = xe[l] * ve[l];
      t = std::fma(xo[l], vo[l], t);
      acc[l] = std::fma(t, s, acc[l]);
    }
  }
  return sum_lanes(acc);
}

// Same bits as dot_mxfp4_expanded, decoding the nibbles on the fly (AVX-512: a 16-entry table lookup per vector).
#if defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 headers (_mm512_undefined_*)
#endif
inline float dot_mxfp4(const Mxfp4Activation& x, const uint8_t* blocks, const uint8_t* scales, int64_t K) {
#if defined(__AVX512F__)
  const __m512 table = _mm512_loadu_ps(kFp4Values.data());
  const __m512i low_nibble = _mm512_set1_epi32(0x0F);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t b = 0; b < K / kMxfp4BlockSize; ++b) {
    const __m512i bytes =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + b * kMxfp4BlockBytes)));
    const __m512 ve = _mm512_permutexvar_ps(_mm512_and_si512(bytes, low_nibble), table);
    const __m512 vo = _mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table);
    __m512 t = _mm512_mul_ps(_mm512_loadu_ps(x.even + b * 16), ve);
    t = _mm512_fmadd_ps(_mm512_loadu_ps(x.odd + b * 16), vo, t);
    acc = _mm512_fmadd_ps(t, _mm512_set1_ps(e8m0_to_float(scales[b])), acc);
  }
  alignas(64) float lanes[kLanes];
  _mm512_store_ps(lanes, acc);
  return sum_lanes(lanes);
#else
  float even[16], odd[16], scale;
  float acc[kLanes] = {};
  for (int64_t b = 0; b < K / kMxfp4BlockSize; ++b) {
    expand_mxfp4_row(blocks + b * kMxfp4BlockBytes, scales + b, kMxfp4BlockSize, even, odd, &scale);
    const float* xe = x.even + b * 16;
    const float* xo = x.odd + b * 16;
    for (int l = 0; l < kLanes; ++l) {
      float t = xe[l] * even[l];
      t = std::fma(xo[l], odd[l], t);
      acc[l] = std::fma(t, scale, acc[l]);
    }
  }
  return sum_lanes(acc);
#endif
}
#if defined(__AVX512F__)
#pragma GCC diagnostic pop
#endif

}  // namespace moeserve::cpu
