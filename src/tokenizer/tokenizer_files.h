// Reading and writing the two tokenizer file formats GPT-OSS comes with:
// - tiktoken's rank file (o200k_base.tiktoken): one "base64(token bytes) rank" line per mergeable token.
// - Hugging Face tokenizers' tokenizer.json, as the GPT-OSS checkpoints ship it (made by transformers'
//   TikTokenConverter): model BPE with "vocab" (byte-level strings, GPT-2's bytes_to_unicode alphabet -> id),
//   "merges" (every split of a token into two tokens, ordered by the merged token's rank) and
//   ignore_merges=true; pre_tokenizer Sequence[Split(Regex pattern, Isolated), ByteLevel(use_regex=false)];
//   added_tokens for the special tokens. Reading takes the ranks from "vocab" (BPE by merged-token rank is
//   tiktoken's algorithm) and checks that "merges" agrees with them.
// Every malformed or truncated file is an Error naming the file and the line, byte or entry.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace moeserve {

std::vector<std::string> read_tiktoken_ranks(const std::string& path);
void write_tiktoken_ranks(const RankTable& ranks, const std::string& path);

TokenizerFileContents read_hf_tokenizer_json(const std::string& path);
void write_hf_tokenizer_json(const Tokenizer& tokenizer, const std::string& path);

// Puts the tokenizer beside a model's weights, as a real checkpoint has it: model_dir/tokenizer.json.
void write_tokenizer_files(const Tokenizer& tokenizer, const std::string& model_dir);

// GPT-2's reversible byte <-> printable code point map, as UTF-8 strings (byte-level BPE's alphabet).
std::string byte_level_encode(std::string_view bytes);
// The bytes behind a byte-level string; false when it has a character outside the alphabet.
bool byte_level_decode(std::string_view text, std::string& bytes);

}  // namespace moeserve
