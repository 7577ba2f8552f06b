#include "runner/runner.h"

#include <algorithm>
#include <utility>

#include "util/error.h"

namespace moeserve {

KvGroups kv_groups_of(const ModelConfig& config) {
  KvGroups groups;
  for (AttentionKind kind : config.layer_types) {
    auto it = std::find(groups.kind_of_group.begin(), groups.kind_of_group.end(), kind);
    int g = static_cast<int>(it - groups.kind_of_group.begin());
    if (it == groups.kind_of_group.end()) {
      groups.kind_of_group.push_back(kind);
      groups.layers_in_group.push_back(0);
      groups.values_per_token_of_group.push_back(config.kv_values_per_token());
    }
    groups.group_of_layer.push_back(g);
    groups.slot_of_layer.push_back(groups.layers_in_group[g]++);
  }
  return groups;
}

int KvGroups::max_layers_per_group() const {
  return layers_in_group.empty() ? 0 : *std::max_element(layers_in_group.begin(), layers_in_group.end());
}

size_t KvGroups::block_bytes(int block_size, size_t element_bytes) const {
  size_t most = 0;
  for (int g = 0; g < num_groups(); ++g)
    most = std::max(most, static_cast<size_t>(layers_in_group[g]) * values_per_token_of_group[g]);
  return most * static_cast<size_t>(block_size) * element_bytes;
}

bool row_samples(const SequenceStep& step, int32_t k) {
  return step.sampling != nullptr && (step.logprob_tokens.empty() || step.logprob_tokens[k] < 0);
}

uint64_t row_sample_index(const SequenceStep& step, int32_t k) {
  uint64_t scored = 0;
  if (!step.logprob_tokens.empty())
    for (int32_t j = 0; j < k; ++j) scored += step.logprob_tokens[j] >= 0;
  return step.sample_index + static_cast<uint64_t>(k) - scored;
}

void ModelRunner::launch(const ForwardBatch& batch) {
  MOESERVE_CHECK(!in_flight_, "the {} runner was asked to launch a step while one is in flight", name());
  forward(batch, launched_);
  in_flight_ = true;
}

void ModelRunner::collect(ForwardOutput& output) {
  MOESERVE_CHECK(in_flight_, "the {} runner was asked to collect a step it did not launch", name());
  in_flight_ = false;
  std::swap(output, launched_);  // the two outputs' buffers alternate, so neither is reallocated each step
}

void ModelRunner::move_kv_slots(std::span<const std::span<const int32_t>>, std::span<const KvSlotMove>) {
  fail("the {} runner cannot move KV slots (tree verification is not implemented there)", name());
}

}  // namespace moeserve
