#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "sampling/sampler.h"
#include "util/error.h"

namespace moeserve {

GenerateResult generate_sequence(ModelRunner& runner, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                 const std::function<void(int32_t)>& on_token) {
  MOESERVE_CHECK(!prompt.empty(), "the prompt is empty");
  MOESERVE_CHECK(options.max_tokens >= 0, "max_tokens {} must be >= 0", options.max_tokens);
  MOESERVE_CHECK(options.prefill_chunk > 0, "prefill chunk must be positive");
  validate_sampling_params(options.sampling);
  const int64_t total = static_cast<int64_t>(prompt.size()) + options.max_tokens;
  MOESERVE_CHECK(total <= runner.config().max_position_embeddings,
                 "prompt of {} tokens plus max_tokens {} exceeds the context of {}", prompt.size(), options.max_tokens,
                 runner.config().max_position_embeddings);

  // One sequence: every KV group gets its own contiguous run of blocks.
  const int groups = kv_groups_of(runner.config()).num_groups();
  const int64_t blocks_per_group = (total + options.block_size - 1) / options.block_size;
  if (runner.kv_cache_layout().block_size != options.block_size ||
      runner.kv_cache_layout().num_blocks < blocks_per_group * groups)
    runner.allocate_kv_cache({options.block_size, blocks_per_group * groups});
  std::vector<std::vector<int32_t>> tables(groups, std::vector<int32_t>(blocks_per_group));
  for (int g = 0; g < groups; ++g) std::iota(tables[g].begin(), tables[g].end(), static_cast<int32_t>(g * blocks_per_group));

  auto step_for = [&](std::span<const int32_t> tokens, int32_t start, int32_t num_logits, uint64_t sample_index) {
    SequenceStep step;
    step.tokens = tokens;
    step.start_position = start;
    for (const auto& table : tables) step.block_tables.emplace_back(table);
    step.num_logits = num_logits;
    step.sampling = &options.sampling;
    step.sample_index = sample_index;
    ForwardBatch batch;
    batch.sequences.push_back(std::move(step));
    batch.return_logits = false;
    return batch;
  };

  GenerateResult result;
  if (options.max_tokens == 0) return result;
  using Clock = std::chrono::steady_clock;
  auto started = Clock::now();
  ForwardOutput output;
  const int32_t n = static_cast<int32_t>(prompt.size());
  for (int32_t begin = 0; begin < n; begin += options.prefill_chunk) {
    int32_t end = std::min(n, begin + options.prefill_chunk);
    runner.forward(step_for(std::span(prompt).subspan(begin, end - begin), begin, end == n ? 1 : 0, 0), output);
  }
  auto prefilled = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(prefilled - started).count();
  int32_t token = output.sampled.at(0);
  while (true) {
    result.tokens.push_back(token);
    if (on_token) on_token(token);
    if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), token) != options.stop_tokens.end()) {
      result.stopped = true;
      break;
    }
    if (static_cast<int>(result.tokens.size()) >= options.max_tokens) break;
    const int32_t position = n + static_cast<int32_t>(result.tokens.size()) - 1;
    runner.forward(step_for(std::span(&token, 1), position, 1, result.tokens.size()), output);
    token = output.sampled.at(0);
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - prefilled).count();
  return result;
}

}  // namespace moeserve
