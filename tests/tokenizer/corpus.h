// The tokenizer's exactness corpus: deterministic text of at least a given size, generated from the committed
// seed (corpus_seed.txt: English, contractions, Chinese, Japanese, Korean, Arabic, Devanagari, other scripts,
// emoji, source code) by a seeded generator that mixes its paragraphs with the cases tokenizers get wrong:
// shuffled and case-mixed words, contractions in every case, runs of spaces, tabs, newlines and Unicode spaces,
// digit runs in several scripts, combining marks, emoji ZWJ sequences, flags and keycaps, and random characters
// from long-assigned blocks (letters whose Unicode category has not changed since Unicode 6).
// The test compares our ids with tiktoken's on it; the benchmark measures both on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace moeserve::testing {

std::string make_tokenizer_corpus(const std::string& seed_text, size_t min_bytes, uint64_t seed = 1);

// The committed seed text (MOESERVE_SOURCE_DIR/tests/tokenizer/corpus_seed.txt).
std::string tokenizer_corpus_seed(const std::string& source_dir);

}  // namespace moeserve::testing
