// Token sampling from one row of logits (see SamplingParams for the rules).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sampling/sampling_params.h"
#include "sampling/sampling_uniform.h"  // sampling_uniform(seed, sample_index): the draw, shared with the GPU

namespace moeserve {

// Fails naming the bad field when params are out of range (negative temperature, top_p outside (0, 1], ...).
void validate_sampling_params(const SamplingParams& params);

int32_t argmax(std::span<const float> logits);

// The request's distribution over the vocabulary up to normalisation: temperature, then top-k, top-p and min-p
// zero the tokens they drop (greedy: one-hot at the argmax). Speculative verification accepts and resamples from it.
std::vector<double> filtered_weights(std::span<const float> logits, const SamplingParams& params);
// Inverse-CDF draw from unnormalised weights with a uniform in [0, 1); only tokens of non-zero weight come out.
int32_t sample_from_weights(std::span<const double> weight, double uniform);

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, uint64_t sample_index);

}  // namespace moeserve
