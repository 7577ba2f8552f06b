// libFuzzer target: the CUDA runner's step metadata (StepMetadata::build, host code) on arbitrary batches:
// sequences of any length, start position, tree parents, block tables (ids missing, negative or past the pool),
// graph padding (to uniform causal steps of any length) and prefill cut-off. A bad batch must end in an Error naming what was wrong; a good one must give
// the attention kernels a layout they can trust: every token in exactly one prefill tile or decode group, tiles
// only for long sequences, groups of consecutive tokens of one sequence, positions and tree masks as the rules
// of runner.h say, every block of the window in the pool.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "model/gpt_oss/make_tiny.h"
#include "runner/cuda/step_metadata.h"
#include "util/error.h"

namespace {

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "attn_fuzz: %s\n", what);
    std::abort();
  }
}

// The input as a stream of small numbers; zeros once it runs out.
struct Bytes {
  const uint8_t* data;
  size_t size, at = 0;
  int next() { return at < size ? data[at++] : 0; }
  int next16() { return next() | next() << 8; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve;
  Bytes in{data, size};
  TinyModelOptions o;
  o.kv_heads = 2;
  o.heads = 2 << (in.next() % 4);  // 1, 2, 4 or 8 query heads per KV head
  o.window = 1 + in.next() % 40;
  o.vocab = 1000;
  const ModelConfig config = tiny_model_config(o);
  const KvGroups groups = kv_groups_of(config);
  const KvCacheLayout kv{1 + in.next() % 16, 1 + in.next16() % 512};
  const int pad_to = in.next() % 4 == 0 ? in.next() % 9 : 0;
  const int pad_len = pad_to > 0 ? in.next() % 10 : 0;  // graph padding's tokens a sequence (0: refused)
  const int prefill_min_rows = std::vector<int>{moeserve::cuda::kNoPrefillTiles, 1, 16, 64}[in.next() % 4];

  const int seqs = 1 + in.next() % 6;
  std::vector<std::vector<int32_t>> tokens(seqs), parents(seqs);
  std::vector<std::vector<std::vector<int32_t>>> tables(seqs);
  ForwardBatch batch;
  for (int s = 0; s < seqs; ++s) {
    const int n = in.next() % 90;
    for (int i = 0; i < n; ++i) tokens[s].push_back(in.next16() % 1100);  // some past the vocabulary
    if (in.next() % 3 == 0)
      for (int i = 0; i < n; ++i) parents[s].push_back(i == 0 ? -1 : in.next() % (i + 1) - 1 - in.next() % 2);
    tables[s].resize(groups.num_groups());
    const int blocks = in.next() % 40;
    for (auto& table : tables[s])
      for (int b = 0; b < blocks; ++b) table.push_back(in.next() % 50 == 0 ? -1 : in.next16() % (kv.num_blocks + 2));
  }
  for (int s = 0; s < seqs; ++s) {
    SequenceStep step;
    step.tokens = tokens[s];
    step.start_position = in.next() % 5 == 0 ? -in.next() : in.next16() % 300;
    step.tree_parent = parents[s];
    step.num_logits = in.next() % (tokens[s].size() + 2);
    for (const auto& table : tables[s]) step.block_tables.emplace_back(table);
    batch.sequences.push_back(step);
  }

  moeserve::cuda::StepMetadata meta;
  try {
    meta.build(batch, config, groups, kv, pad_to, pad_len, 0, prefill_min_rows);
  } catch (const Error&) {
    return 0;  // refused, with a message
  }
  const moeserve::cuda::StepView view = meta.view(meta.host().data());
  const int group_tokens = moeserve::cuda::decode_group_tokens(config.heads_per_kv());
  std::vector<int> covered(view.num_tokens, 0);
  for (int i = 0; i < view.num_q_tiles; ++i) {
    const int s = view.q_tile_seq[i];
    check(s >= 0 && s < view.num_seqs, "tile sequence out of range");
    check(prefill_min_rows > 0 && view.seq_q_len[s] >= prefill_min_rows, "a tile for a short sequence");
    check(view.q_tile_row0[i] % moeserve::cuda::kPrefillTileRows == 0 && view.q_tile_row0[i] < view.seq_q_len[s],
          "tile row outside its sequence");
    const int end = std::min(view.q_tile_row0[i] + moeserve::cuda::kPrefillTileRows, view.seq_q_len[s]);
    for (int r = view.q_tile_row0[i]; r < end; ++r) ++covered[view.seq_q_start[s] + r];
  }
  for (int i = 0; i < view.num_decode_groups; ++i) {
    const int t0 = view.decode_token0[i];
    check(t0 >= 0 && t0 < view.num_tokens, "decode group token out of range");
    const int s = view.token_seq[t0];
    check(prefill_min_rows <= 0 || view.seq_q_len[s] < prefill_min_rows, "a decode group for a long sequence");
    check((t0 - view.seq_q_start[s]) % group_tokens == 0, "decode group not at a group boundary");
    const int end = std::min(t0 + group_tokens, view.seq_q_start[s] + view.seq_q_len[s]);
    for (int t = t0; t < end; ++t) ++covered[t];
  }
  for (int t = 0; t < view.num_tokens; ++t) check(covered[t] == 1, "a token in no attention launch or in two");

  // Graph padding: sequences of pad_len tokens at positions 0 .. pad_len - 1 after the real ones.
  check(view.num_seqs == std::max(seqs, pad_to), "sequence count with padding");
  for (int s = seqs; s < view.num_seqs; ++s) {
    check(view.seq_q_len[s] == pad_len && view.seq_context[s] == pad_len, "padding sequence length");
    for (int i = 0; i < pad_len; ++i) check(view.positions[view.seq_q_start[s] + i] == i, "padding position");
  }
  const int stride = *view.table_stride;
  for (int s = 0; s < static_cast<int>(batch.sequences.size()); ++s) {
    const SequenceStep& step = batch.sequences[s];
    const int n = static_cast<int>(step.tokens.size());
    check(view.seq_q_len[s] == n && view.seq_context[s] == step.start_position + n, "sequence lengths");
    for (int i = 0; i < n; ++i) {
      const int t = view.seq_q_start[s] + i, position = view.positions[t];
      check(view.token_seq[t] == s, "token's sequence");
      check(position >= step.start_position && position < step.start_position + n, "position outside the step");
      if (step.tree_parent.empty()) check(position == step.start_position + i, "causal position");
    }
    // Every slot a query of the step reads (its window, or all of the context) has a block in the pool.
    for (int g = 0; g < groups.num_groups(); ++g) {
      const bool sliding = groups.kind_of_group[g] == AttentionKind::sliding;
      const int first = sliding ? std::max(0, step.start_position - config.sliding_window + 1) : 0;
      const int32_t* table = view.block_tables + (static_cast<int64_t>(s) * view.num_groups + g) * stride;
      for (int slot = first; slot < step.start_position + n; ++slot) {
        const int block = table[slot / kv.block_size];
        check(block >= 0 && block < kv.num_blocks, "a read slot without a block in the pool");
      }
    }
  }
  return 0;
}
