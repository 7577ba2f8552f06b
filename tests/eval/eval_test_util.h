// Helpers for the eval tests: Harmony replies as text, and a stand-in tokenizer for them (each byte its own
// token, Harmony's special tokens their o200k_harmony ids) so logs can be built without the o200k ranks.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeserve::eval::testing {

inline std::string harmony_reply(const std::string& final_text, const std::string& analysis = "Let me think.") {
  return "<|channel|>analysis<|message|>" + analysis + "<|end|><|start|>assistant<|channel|>final<|message|>" +
         final_text + "<|return|>";
}

inline constexpr std::array<std::pair<std::string_view, int32_t>, 5> kSpecialTokens = {{
    {"<|return|>", 200002}, {"<|channel|>", 200005}, {"<|start|>", 200006}, {"<|end|>", 200007},
    {"<|message|>", 200008},
}};

inline std::vector<int32_t> synthetic_tokens(std::string_view text) {
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < text.size();) {
    bool special = false;
    for (const auto& [name, id] : kSpecialTokens) {
      if (text.substr(i).starts_with(name)) {
        tokens.push_back(id);
        i += name.size();
        special = true;
        break;
      }
    }
    if (!special) tokens.push_back(static_cast<unsigned char>(text[i++]));
  }
  return tokens;
}

inline std::string synthetic_detokenize(std::span<const int32_t> tokens) {
  std::string text;
  for (int32_t t : tokens) {
    if (t < 256) {
      text.push_back(static_cast<char>(t));
      continue;
    }
    for (const auto& [name, id] : kSpecialTokens) {
      if (id == t) text += name;
    }
  }
  return text;
}

}  // namespace moeserve::eval::testing
