// The host side of the expanded-form MLA prefill (mla_prefill.h): the work lists, the scratch's size and the
// shapes the kernels take.
#include <cstdint>
#include <limits>

#include "runner/cuda/mla_prefill.h"
#include "util/error.h"

namespace moeserve::cuda {

MlaPrefillPlan mla_prefill_plan(const std::vector<MlaPrefillSequence>& sequences) {
  MlaPrefillPlan plan;
  plan.sequences = static_cast<int>(sequences.size());
  std::vector<int32_t> seq, q_start, q_len, kv_row0{0}, tile_seq, tile_row0;
  int64_t rows = 0;
  for (int i = 0; i < plan.sequences; ++i) {
    const MlaPrefillSequence& s = sequences[i];
    MOESERVE_CHECK(s.q_len >= 1 && s.q_len <= s.context && s.seq >= 0 && s.q_start >= 0,
                   "MLA prefill: planned sequence {} (step sequence {}, first row {}) has {} query tokens and a "
                   "context of {}: 1 <= q_len <= context",
                   i, s.seq, s.q_start, s.q_len, s.context);
    rows += s.context;
    MOESERVE_CHECK(rows <= std::numeric_limits<int32_t>::max(),
                   "MLA prefill: {} context rows to expand pass int32's range", rows);
    seq.push_back(s.seq);
    q_start.push_back(s.q_start);
    q_len.push_back(s.q_len);
    kv_row0.push_back(static_cast<int32_t>(rows));
    for (int r = 0; r < s.q_len; r += kMlaPrefillTileRows) {
      tile_seq.push_back(i);
      tile_row0.push_back(r);
    }
  }
  plan.tiles = static_cast<int>(tile_seq.size());
  plan.kv_rows = static_cast<int>(rows);
  for (const auto* list : {&seq, &q_start, &q_len, &kv_row0, &tile_seq, &tile_row0})
    plan.words.insert(plan.words.end(), list->begin(), list->end());
  return plan;
}

MlaPrefillWork MlaPrefillPlan::view(const int32_t* device_words) const {
  MlaPrefillWork w;
  w.sequences = sequences;
  w.tiles = tiles;
  w.kv_rows = kv_rows;
  w.seq = device_words;
  w.q_start = w.seq + sequences;
  w.q_len = w.q_start + sequences;
  w.kv_row0 = w.q_len + sequences;
  w.tile_seq = w.kv_row0 + sequences + 1;
  w.tile_row0 = w.tile_seq + tiles;
  return w;
}

size_t mla_prefill_scratch_bytes(const MlaKvbView& kv_b, int rope_dim, int64_t kv_rows) {
  const int64_t per_row = static_cast<int64_t>(kv_b.heads) * (kv_b.nope_dim + kv_b.v_dim) + rope_dim;
  return static_cast<size_t>(kv_rows * per_row) * 2;
}

std::string mla_prefill_shape_error(const MlaKvbView& kv_b, const MlaCacheView& cache) {
  const MlaCacheShape& s = cache.shape;
  if (kv_b.heads <= 0 || kv_b.nope_dim <= 0 || kv_b.v_dim <= 0 || kv_b.kv_lora_rank <= 0 || s.rope_dim <= 0 ||
      s.block_size <= 0 || s.layers <= 0)
    return "MLA prefill: heads, nope_dim, v_dim, kv_lora_rank, rope_dim, block_size and layers must be positive";
  if (kv_b.type == MlaWeightType::f32)
    return "MLA prefill: kv_b must be bf16 or fp8_block (an fp32 kv_b belongs to the fp32 path, whose fp32 cache "
           "the bf16 tensor-core prefill does not read)";
  if (cache.dtype == KvDtype::f32) return "MLA prefill: the latent cache must be bf16 or fp8 e4m3";
  if (kv_b.kv_lora_rank != s.kv_lora_rank) return "MLA prefill: kv_b's kv_lora_rank differs from the cache's";
  if (kv_b.nope_dim % 16 != 0 || s.rope_dim % 16 != 0 || kv_b.kv_lora_rank % 16 != 0)
    return "MLA prefill: nope_dim, rope_dim and kv_lora_rank must be multiples of 16";
  if (kv_b.nope_dim + s.rope_dim > 192) return "MLA prefill: nope_dim + rope_dim must be at most 192";
  if (kv_b.v_dim % 8 != 0 || kv_b.v_dim > 128) return "MLA prefill: v_dim must be a multiple of 8, at most 128";
  return {};
}

}  // namespace moeserve::cuda
