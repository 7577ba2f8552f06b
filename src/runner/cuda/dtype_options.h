// CudaRunnerOptions' precision and kv_cache_dtype (cuda_runner_factory.h) as the CUDA runners take them: both the
// GPT-OSS runner (cuda_runner.h) and the DeepSeek-V3 runner (deepseek_cuda_runner.h), whose KV cache is MLA's
// latent cache.
#pragma once

#include <string>

#include "runner/cuda/kernels.h"
#include "util/error.h"

namespace moeserve::cuda {

inline Precision parse_precision(const std::string& name) {
  if (name == "bf16") return Precision::bf16;
  if (name == "f32") return Precision::f32;
  fail("CUDA runner precision \"{}\" (bf16 or f32)", name);
}

// vLLM's --kv-cache-dtype values (fp8 is its alias of fp8_e4m3, bfloat16 its spelling of bf16). fp8 e4m3 takes
// GPT-OSS's per-layer K and V scales (kv_scales.h); DeepSeek's latents take scale 1 (a DeepSeek checkpoint carries
// no KV scales; the latents are RMS-normed, k_pe of the order of the activations).
inline KvDtype parse_kv_dtype(const std::string& name, Precision precision) {
  if (name == "auto") return precision == Precision::f32 ? KvDtype::f32 : KvDtype::bf16;
  const bool bf16 = name == "bf16" || name == "bfloat16", fp8 = name == "fp8" || name == "fp8_e4m3";
  MOESERVE_CHECK(bf16 || fp8, "--kv-cache-dtype \"{}\" (auto, bf16 or fp8_e4m3; fp8 is fp8_e4m3)", name);
  MOESERVE_CHECK(precision == Precision::bf16,
                 "--kv-cache-dtype {} needs --dtype bfloat16: float32 keeps an f32 KV cache (use auto)", name);
  return fp8 ? KvDtype::fp8_e4m3 : KvDtype::bf16;
}

}  // namespace moeserve::cuda
