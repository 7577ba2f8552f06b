// Encode throughput of moeserve's o200k_harmony tokenizer, single-threaded, on the exactness corpus (or a file).
// Usage: tokenizer_encode_bench [--write-corpus FILE] [--corpus FILE] [--repeat N]
//   --write-corpus FILE  write the generated corpus (tests/tokenizer/corpus.h) and exit
//   --corpus FILE        measure on this text instead of the generated corpus
// Prints the best of N runs (default 5) in MB/s (10^6 bytes per second), by wall-clock and by the thread's CPU time.
#include <fmt/core.h>

#include <chrono>
#include <ctime>
#include <string>
#include <thread>

#include "tokenizer/corpus.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/files.h"

// CPU time of this thread: on a shared machine it counts only the time the encoder ran.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

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
    double best_wall = 1e30, best_cpu = 1e30;
    size_t tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      // Each run on a fresh thread: the tokenizer's per-thread piece cache starts empty, as tiktoken has none.
      std::thread run([&] {
        const auto start = std::chrono::steady_clock::now();
        const double cpu_start = thread_cpu_seconds();
        tokens = tokenizer->encode_ordinary(text).size();
        best_cpu = std::min(best_cpu, thread_cpu_seconds() - cpu_start);
        best_wall =
            std::min(best_wall, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      });
      run.join();
    }
    fmt::print("moeserve  encode_ordinary: {:7.2f} MB/s wall, {:7.2f} MB/s CPU time  ({} bytes, {} tokens, best of {})\n",
               text.size() / best_wall / 1e6, text.size() / best_cpu / 1e6, text.size(), tokens, repeat);
  } catch (const Error& e) {
    fmt::print(stderr, "tokenizer_encode_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
