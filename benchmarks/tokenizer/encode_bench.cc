// Encode throughput of moeserve's o200k_harmony tokenizer, single-threaded, on the exactness corpus (or a file).
// Usage: tokenizer_encode_bench [--write-corpus FILE] [--corpus FILE] [--repeat N]
//   --write-corpus FILE  write the generated corpus (tests/tokenizer/corpus.h) and exit
//   --corpus FILE        measure on this text instead of the generated corpus
// Prints the best of N runs (default 5) in MB/s (10^6 bytes per second) and tokens/s.
#include <fmt/core.h>

#include <chrono>
#include <string>

#include "tokenizer/corpus.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/files.h"

int main(int argc, char** argv) {
  using namespace moeserve;
  try {
    std::string corpus_file, write_corpus;
    int repeat = 5;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      MOESERVE_CHECK(i + 1 < argc, "{} needs a value", arg);
      if (arg == "--corpus") corpus_file = argv[++i];
      else if (arg == "--write-corpus") write_corpus = argv[++i];
      else if (arg == "--repeat") repeat = std::stoi(argv[++i]);
      else fail("unknown argument {}", arg);
    }
    const std::string text = corpus_file.empty()
                                 ? testing::make_tokenizer_corpus(testing::tokenizer_corpus_seed(MOESERVE_SOURCE_DIR),
                                                                  1200 * 1000)
                                 : read_text_file(corpus_file);
    if (!write_corpus.empty()) {
      write_text_file(write_corpus, text);
      return 0;
    }
    const auto tokenizer = Tokenizer::o200k_harmony();
    double best = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      tokens = tokenizer->encode_ordinary(text).size();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    fmt::print("moeserve  encode_ordinary: {:7.2f} MB/s  {:9.0f} tokens/s  ({} bytes, {} tokens, best of {})\n",
               text.size() / best / 1e6, tokens / best, text.size(), tokens, repeat);
  } catch (const Error& e) {
    fmt::print(stderr, "tokenizer_encode_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
