// libFuzzer target: the DeepSeek-V3 family's input parsing. The first byte picks what the rest is:
//   0  a config.json: parse_config either fails with an Error or gives a config whose derived numbers are finite;
//   1  text for DeepSeek-R1's tokenizer: encoding fails with an Error (ill-formed UTF-8) or round-trips, with and
//      without added tokens;
//   2  token ids (4 bytes each, mostly in the vocabulary): decoding, and R1's reply stream, whose deltas must add
//      up to the reply read whole;
//   3  a tokenizer.json of the merges-list kind: loading fails with an Error or gives a tokenizer that encodes.
// Anything else than an Error (a crash, a sanitizer report, another exception) is a finding.
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/r1_chat.h"
#include "model/deepseek_v3/config.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_files.h"
#include "util/error.h"
#include "util/files.h"

namespace {

using namespace moeserve;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "deepseek_fuzz: %s\n", what);
    std::abort();
  }
}

const Tokenizer& r1() {
  static const auto t = Tokenizer::from_file(std::string(MOESERVE_DEEPSEEK_TOKENIZER_DIR) + "/tokenizer.json");
  return *t;
}

void fuzz_config(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return;
  const deepseek_v3::Config c = deepseek_v3::parse_config(j, "fuzz config.json");
  check(std::isfinite(c.softmax_scale()) && c.softmax_scale() > 0, "softmax scale not finite and positive");
  check(std::isfinite(c.rope_attention_factor()), "rope attention factor not finite");
  for (float f : c.rope_inverse_frequencies()) check(std::isfinite(f) && f > 0, "inverse frequency not finite");
  check(c.engine_view().layer_types.size() == static_cast<size_t>(c.num_layers), "engine view lacks layers");
}

void fuzz_text(const std::string& text) {
  const std::vector<TokenId> ordinary = r1().encode_ordinary(text);
  check(r1().decode_bytes(ordinary) == text, "encode_ordinary does not round-trip");
  const std::vector<TokenId> added = r1().encode(text, AllowedSpecial::all());
  check(r1().decode_bytes(added) == text, "encode with added tokens does not round-trip");
}

void fuzz_ids(const std::string& bytes) {
  std::vector<TokenId> ids(bytes.size() / 4);
  if (!ids.empty()) std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  for (TokenId& id : ids) id = static_cast<TokenId>(static_cast<uint32_t>(id) % 129300u) - 3;  // mostly valid
  (void)r1().decode(ids);
  (void)r1().decode_skipping_special(ids);
  chat::R1ReplyStream stream(r1());
  std::string reasoning, content;
  for (TokenId id : ids) {
    const auto d = stream.push(id);
    reasoning += d.reasoning;
    content += d.content;
  }
  const auto last = stream.finish();
  reasoning += last.reasoning;
  content += last.content;
  const chat::R1Reply whole = chat::parse_r1_reply(r1(), ids);
  check(whole.reasoning == reasoning && whole.content == content, "streamed reply differs from the whole");
}

void fuzz_tokenizer_json(const std::string& text) {
  static const std::string path = [] {
    char dir[] = "/tmp/deepseek_fuzz-XXXXXX";
    check(mkdtemp(dir) != nullptr, "mkdtemp failed");
    return std::string(dir) + "/tokenizer.json";
  }();
  write_text_file(path, text);
  const auto tokenizer = Tokenizer::from_file(path);
  const std::vector<TokenId> ids = tokenizer->encode("hello <x> 12345 world", AllowedSpecial::all());
  check(tokenizer->decode_bytes(ids) == "hello <x> 12345 world", "a loaded tokenizer does not round-trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 4) {
      case 0: fuzz_config(rest); break;
      case 1: fuzz_text(rest); break;
      case 2: fuzz_ids(rest); break;
      default: fuzz_tokenizer_json(rest); break;
    }
  } catch (const Error&) {
  }
  return 0;
}
