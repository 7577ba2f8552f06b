// The published DeepSeek-V3 family shapes, as deepseek-ai/DeepSeek-R1's config.json gives them (DeepSeek-V3's are
// the same): for make-tiny --family deepseek-v3 --shape, full width at a depth of the caller's choosing.
#pragma once

#include <string>

#include "model/deepseek_v3/config.h"

namespace moeserve::deepseek_v3 {

// Sets the widths of the named model in `config` (hidden and intermediate sizes, heads, the MLA ranks and head
// dims, experts and groups); depth, router scaling, RoPE and vocabulary are the caller's. Fails naming the shape
// when it is not "deepseek-r1".
void apply_known_shape(const std::string& name, Config& config);

}  // namespace moeserve::deepseek_v3
