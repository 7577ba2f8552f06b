// o200k_harmony, the tokenizer of GPT-OSS: o200k_base's 199,998 mergeable ranks and pattern, plus the special
// tokens of openai/harmony (src/tiktoken_ext/public_encodings.rs @ec7606d): the named Harmony tokens, and
// <|reserved_N|> for every other id from 199998 up to and including 201088. (The model's embedding has 201088
// rows, ids 0..201087; harmony's table also names 201088, and so does this one.)
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/rank_table.h"

namespace moeserve::o200k {

inline constexpr TokenId kMergeableTokens = 199998;  // o200k_base ranks 0..199997
inline constexpr TokenId kFirstSpecial = 199998;
inline constexpr TokenId kLastSpecial = 201088;
inline constexpr TokenId kVocabularySize = 201088;  // rows of GPT-OSS's embedding

inline constexpr TokenId kStartOfText = 199998;  // <|startoftext|>
inline constexpr TokenId kEndOfText = 199999;    // <|endoftext|>
inline constexpr TokenId kReturn = 200002;       // <|return|>: the assistant is done (stops generation)
inline constexpr TokenId kConstrain = 200003;    // <|constrain|>: starts a constrained content type
inline constexpr TokenId kChannel = 200005;      // <|channel|>
inline constexpr TokenId kStart = 200006;        // <|start|>: a message begins
inline constexpr TokenId kEnd = 200007;          // <|end|>: a message ends
inline constexpr TokenId kMessage = 200008;      // <|message|>: the header ends, content follows
inline constexpr TokenId kCall = 200012;         // <|call|>: a tool call ends (stops generation)

// Hugging Face's GPT-OSS tokenizer.json lists 199998..200018 as added tokens and names 200018 <|endofprompt|>
// (transformers convert_gpt_oss_weights_to_hf.py); harmony leaves it reserved.
inline constexpr TokenId kEndOfPrompt = 200018;
inline constexpr TokenId kLastHfAddedToken = 200018;
inline constexpr std::string_view kEndOfPromptName = "<|endofprompt|>";

// Harmony's name for a special id in [kFirstSpecial, kLastSpecial].
std::string special_token_name(TokenId id);

// o200k's pre-tokenisation pattern (tiktoken's o200k_base pat_str; harmony uses the same).
inline constexpr std::string_view kPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|"
    "\\s+";

}  // namespace moeserve::o200k
