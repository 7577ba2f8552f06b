#include "sampling/logits_oracle.h"

#include <algorithm>
#include <cmath>

#include "runner/cpu/cpu_runner.h"

namespace moeserve::testing {

std::vector<float> oracle_edit(std::vector<float> logits, const LogitsProcessing& p, const std::vector<int32_t>& prompt,
                               const std::vector<int32_t>& output, bool hold_stops, const std::vector<int32_t>& stops) {
  for (size_t t = 0; t < logits.size(); ++t) {
    const auto token = static_cast<int32_t>(t);
    float x = logits[t];
    for (const auto& [id, bias] : p.logit_bias)
      if (id == token) x += bias;
    if (hold_stops && std::count(stops.begin(), stops.end(), token) > 0) x = -INFINITY;
    const auto count = static_cast<float>(std::count(output.begin(), output.end(), token));
    const bool seen = count > 0 || std::count(prompt.begin(), prompt.end(), token) > 0;
    if (seen && p.repetition_penalty != 1.0f) x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    x -= p.frequency_penalty * count + (count > 0 ? p.presence_penalty : 0.0f);
    logits[t] = x;
  }
  return logits;
}

std::vector<long double> log_softmax(std::span<const float> logits) {
  long double m = -INFINITY, sum = 0;
  for (float x : logits) m = std::max<long double>(m, x);
  for (float x : logits) sum += std::exp(static_cast<long double>(x) - m);
  std::vector<long double> out;
  for (float x : logits) out.push_back(static_cast<long double>(x) - m - std::log(sum));
  return out;
}

std::vector<std::vector<float>> logits_at_every_position(ModelRunner& runner, const std::vector<int32_t>& tokens) {
  const int groups = kv_groups_of(runner.config()).num_groups();
  const int blocks = static_cast<int>(tokens.size()) / 8 + 1;
  runner.allocate_kv_cache({8, blocks * groups});
  std::vector<std::vector<int32_t>> tables(groups);
  for (int g = 0; g < groups; ++g)
    for (int b = 0; b < blocks; ++b) tables[g].push_back(g * blocks + b);
  ForwardBatch batch;
  SequenceStep step;
  step.tokens = tokens;
  for (const auto& t : tables) step.block_tables.emplace_back(t);
  step.num_logits = static_cast<int32_t>(tokens.size());
  batch.sequences.push_back(step);
  ForwardOutput out;
  runner.forward(batch, out);
  const int64_t V = runner.config().vocab_size;
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r < tokens.size(); ++r)
    rows.emplace_back(out.logits.begin() + static_cast<int64_t>(r) * V, out.logits.begin() + static_cast<int64_t>(r + 1) * V);
  return rows;
}

std::vector<std::vector<float>> logits_at_every_position(std::shared_ptr<const Checkpoint> checkpoint,
                                                         const std::vector<int32_t>& tokens) {
  CpuRunner runner(std::move(checkpoint), 2);
  return logits_at_every_position(runner, tokens);
}

}  // namespace moeserve::testing
