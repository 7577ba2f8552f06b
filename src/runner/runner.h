// The model runner interface: one forward step over a batch of sequences, each contributing a run of new tokens
// (a prefill chunk, one decode token, or draft tokens to verify) at known positions, reading and writing a paged
// KV cache through per-sequence block tables. The CPU reference runner and the CUDA runner implement it; the
// scheduler, the server and the speculative decoder know a runner only through it.
//
// Paged KV: the cache is a pool of fixed-size blocks of `block_size` token slots. Layers are split into KV groups
// by attention kind (GPT-OSS: sliding-window layers and full layers), and every group has its own block table per
// sequence, so the sliding group can give back blocks its window no longer sees (-1 in the table) while the full
// group keeps them all. A physical block holds K and V of `block_size` tokens for every layer of one group.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sampling/logit_edit.h"
#include "sampling/logprobs.h"
#include "model/config.h"
#include "sampling/sampling_params.h"

namespace moeserve {

struct KvCacheLayout {
  int block_size = 16;     // token slots per block
  int64_t num_blocks = 0;  // blocks in the pool, shared by all groups
};

// The KV groups of a model: group_of_layer[i] is layer i's group; layers_in_group[g] counts them.
struct KvGroups {
  std::vector<int> group_of_layer;
  std::vector<int> slot_of_layer;  // index of the layer inside its group's block storage
  std::vector<int> layers_in_group;
  std::vector<AttentionKind> kind_of_group;
  // The KV values one token costs per layer of the group (ModelConfig::kv_values_per_token: GPT-OSS's K and V
  // heads, 2 x 8 x 64 on both its sliding and its full layers; DeepSeek's latent, 512 + 64).
  std::vector<int> values_per_token_of_group;
  int num_groups() const { return static_cast<int>(layers_in_group.size()); }
  int max_layers_per_group() const;
  // Bytes of one pool block of `block_size` tokens at `element_bytes` a value: the groups share the pool's blocks,
  // so a block is sized for the group whose layers cost the most.
  size_t block_bytes(int block_size, size_t element_bytes) const;
};
KvGroups kv_groups_of(const ModelConfig& config);

// One sequence's share of a step.
struct SequenceStep {
  std::span<const int32_t> tokens;  // the new tokens; their KV is written by this step
  int32_t start_position = 0;       // position of tokens[0]; KV for positions [0, start_position) is in the cache
  // block_tables[g][i]: the physical block holding positions [i * block_size, (i + 1) * block_size) for KV group g.
  // Must cover every position up to start_position + tokens.size(); blocks outside a sliding window may be -1.
  std::vector<std::span<const int32_t>> block_tables;
  int32_t num_logits = 1;  // logits rows for the last num_logits tokens (0 for a prefill chunk that is not the last)
  const SamplingParams* sampling = nullptr;  // when set, one token is sampled from every logits row
  uint64_t sample_index = 0;                 // sampling stream position of the first row (tokens generated so far)
  // Tree verification (speculative decoding): when set, tree_parent[i] is the index within this step of token i's
  // parent (-1: the cached prefix's last token; parents come before their children). Token i then attends to the
  // cached prefix [0, start_position) and its own ancestors only, sits at position start_position + depth(i)
  // (depth 0 for a parent of -1) for RoPE and the sliding window, and its KV is written at slot
  // start_position + i, not at its position: siblings share a position but not a slot. A path is committed to
  // contiguous positions with ModelRunner::move_kv_slots. Empty: the tokens are a causal run (slot = position).
  std::span<const int32_t> tree_parent;
  // Logits processing (sampling/logits_processing.h) of the rows that sample: these edits (ascending distinct
  // tokens), then every token outside allowed_tokens (one bit per token; empty allows all) to -inf.
  std::span<const LogitEdit> logit_edits;
  std::span<const uint32_t> allowed_tokens;
  // Raw logprobs (sampling/logprobs.h) of every logits row with this many top tokens; -1: none.
  int32_t top_logprobs = -1;
  // Per logits row, the token whose logprob is reported (prompt logprobs: the prompt's next token); -1, or an
  // empty span, reports the sampled token. A row with a token given here is scored, not sampled.
  std::span<const int32_t> logprob_tokens;
};

// Whether logits row k of a step (0 = its first of num_logits) draws a token, and that draw's sampling stream
// position: rows that are only scored (a logprob token given) neither draw nor advance the stream.
bool row_samples(const SequenceStep& step, int32_t k);
uint64_t row_sample_index(const SequenceStep& step, int32_t k);

// Copy the K and V of every layer at slot `from` to slot `to`, within one sequence's block tables.
struct KvSlotMove {
  int32_t from;
  int32_t to;
};

struct ForwardBatch {
  std::vector<SequenceStep> sequences;
  bool return_logits = true;
  std::vector<int> capture_layers;  // residual stream after these layers is returned for every token
};

struct ForwardOutput {
  std::vector<float> logits;     // [rows, vocab] when return_logits; rows in sequence order
  std::vector<int32_t> sampled;  // [rows] for sequences with sampling set (-1 for rows of the others)
  std::vector<std::vector<float>> captured;  // [capture_layers.size()][tokens, hidden]
  // [rows] when a step asks for logprobs (chosen.token -1 in the rows of the others); else empty.
  std::vector<TokenLogprobs> logprobs;
  int64_t rows = 0;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;

  // Bytes one KV block takes; the engine divides its memory budget by this.
  virtual size_t kv_block_bytes(int block_size) const = 0;
  // Device memory still free after the weights (0 for a runner on host memory); the engine sizes its KV pool as a
  // fraction of it when asked to (SGLang's --mem-fraction-static; the old --kv-cache-fraction).
  virtual size_t device_memory_free() const { return 0; }
  // The device's whole memory (0 for a runner on host memory): vLLM's --gpu-memory-utilization is a share of it.
  virtual size_t device_memory_total() const { return 0; }
  // (Re)allocates the KV pool; contents are undefined until written by forward().
  virtual void allocate_kv_cache(const KvCacheLayout& layout) = 0;
  virtual const KvCacheLayout& kv_cache_layout() const = 0;

  virtual void forward(const ForwardBatch& batch, ForwardOutput& output) = 0;

  // The same step split in two, so that the engine can schedule and prepare the next step on the host while this
  // one runs (vLLM's async scheduling): launch() starts the step and returns, collect() waits for it and fills
  // `output`. At most one step is in flight (the next launch comes after collect). launch() reads the batch before
  // it returns: the engine edits the sequences' tokens and block tables while the step runs. A failure of the step
  // itself may surface in either. The default runs forward() in launch(), which is right for any runner whose
  // forward returns only when the step is done (the CPU runners, the tensor-parallel ones, test fakes).
  virtual void launch(const ForwardBatch& batch);
  virtual void collect(ForwardOutput& output);

  // Moves KV slots within one sequence, in order (a later move may read a slot an earlier one wrote). The engine
  // commits the accepted path of a verified tree this way: node i of a step at slot start + i goes to position
  // start + depth(i), so the path ends up contiguous exactly as if it had been computed causally; slots past the
  // path are left as they are (rejected KV, overwritten later). Copying the accepted path keeps the block tables
  // and the prefix cache untouched, which re-mapping blocks could not do at slot granularity. The default fails:
  // a runner that cannot verify trees never gets here.
  virtual void move_kv_slots(std::span<const std::span<const int32_t>> block_tables, std::span<const KvSlotMove> moves);

 private:
  // The default launch()'s output, handed over by collect().
  ForwardOutput launched_;
  bool in_flight_ = false;
};

}  // namespace moeserve
