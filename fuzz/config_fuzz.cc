// libFuzzer target: config.json and generation_config.json (and an EAGLE-3 head's config.json) parsing on
// arbitrary bytes. Each input is parsed as JSON with the nesting limit, then handed to every config reader:
// each must return a config that passes its own validation or fail with an Error, never crash or allocate
// without bound.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "model/config.h"
#include "model/eagle3/config.h"
#include "util/error.h"
#include "util/json_parse.h"

namespace {

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "config_fuzz: %s\n", what);
    std::abort();
  }
}

template <typename Parse>
void try_parse(Parse&& parse) {
  try {
    parse();
  } catch (const moeserve::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve;
  nlohmann::json json;
  try {
    json = parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
  } catch (const Error&) {
    return 0;
  }
  try_parse([&] {
    const ModelConfig c = parse_hf_config(json, "config.json");
    check(static_cast<int>(c.layer_types.size()) == c.num_layers, "layer_types does not match num_layers");
    check(c.num_layers <= config_limits::kLayers && c.vocab_size <= config_limits::kVocabSize, "bounds not held");
    (void)rope_inverse_frequencies(c);
    (void)to_hf_config_json(c).dump();
  });
  try_parse([&] {
    const ModelConfig c = parse_original_config(json, "config.json");
    check(c.max_position_embeddings <= config_limits::kPositions, "context not bounded");
    (void)rope_inverse_frequencies(c);
  });
  try_parse([&] {
    for (int32_t id : parse_eos_token_ids(json, "generation_config.json")) check(id >= 0, "negative eos id");
  });
  try_parse([&] {
    const speculative::Eagle3Config c = speculative::parse_eagle3_config(json, "draft/config.json", 36);
    check(!c.aux_layer_ids.empty() && c.aux_layer_ids.back() < 36, "aux layers out of the target");
    (void)speculative::llama_rope_inverse_frequencies(c.rope, c.head_dim);
  });
  return 0;
}
