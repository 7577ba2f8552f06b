// The per-token cost of constrained decoding's allowed-token mask over the 201,088-token vocabulary
// (structured/token_mask.h): for states of a JSON schema that stress each path of compute_mask (structural
// positions, where few first bytes are allowed; a string's plain text, where almost every token is and the fast
// path decides by length; a number), the time of one uncached mask (median of --repeats), of one cached lookup
// (the state seen before), and how many tokens the mask allows. Figures go to docs/PERF.md.
//   build/benchmarks/structured/mask_bench [--repeats 15]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>

#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

using namespace moeserve;
using nlohmann::json;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int popcount(const structured::TokenMask& mask) {
  int n = 0;
  for (uint32_t w : mask) n += __builtin_popcount(w);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("token mask cost at 201,088 tokens");
  int repeats = 15;
  app.add_option("--repeats", repeats, "uncached masks timed per state (the median is printed)");
  CLI11_PARSE(app, argc, argv);

  const auto tokenizer = Tokenizer::o200k_harmony();
  constexpr int32_t kVocab = 201088;
  auto started = std::chrono::steady_clock::now();
  std::vector<std::string> bytes(kVocab);
  std::vector<bool> special(kVocab);
  for (int32_t id = 0; id < kVocab; ++id) {
    special[id] = tokenizer->is_special(id);
    if (!special[id]) bytes[id] = std::string(tokenizer->token_bytes(id));
  }
  auto vocab = std::make_shared<const structured::TokenVocabulary>(std::move(bytes), std::move(special));
  const double vocab_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();

  const json schema = json::parse(R"({"type": "object", "additionalProperties": false,
      "required": ["name", "age", "tags"], "properties": {"age": {"type": "integer"},
      "name": {"type": "string", "maxLength": 64}, "tags": {"type": "array", "items": {"enum": ["a", "bb"]}}}})");
  started = std::chrono::steady_clock::now();
  structured::GrammarCache cache(vocab);
  const auto grammar = cache.json_schema(schema);
  const double compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();

  fmt::print("vocabulary index: {:.1f} ms; schema compiled: {:.3f} ms\n", vocab_ms, compile_ms);
  fmt::print("{:<44} {:>12} {:>14} {:>10}\n", "state (text so far)", "uncached ms", "cached us", "allowed");
  for (const char* prefix : {"", "{", "{\"age\":", "{\"age\":12", "{\"age\":12,\"name\":\"", "{\"age\":12,\"name\":\"Bob",
                             "{\"age\":12,\"name\":\"Bob\",\"tags\":[", "{\"age\":12,\"name\":\"Bob\",\"tags\":[\"a\""}) {
    structured::MatcherState state = grammar->start();
    if (!grammar->matcher().feed(state, prefix)) return 1;
    std::vector<double> ms;
    structured::TokenMask mask;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      mask = grammar->compute_mask(state);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    grammar->mask(state);  // into the cache
    constexpr int kLookups = 2000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kLookups; ++i) grammar->mask(state);
    const double cached_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kLookups;
    fmt::print("{:<44} {:>12.3f} {:>14.3f} {:>10}\n", fmt::format("'{}'", prefix), median(ms), cached_us,
               popcount(mask));
  }
  return 0;
}
