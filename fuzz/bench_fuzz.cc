// libFuzzer target: what the bench reads from a server under test. Arbitrary bytes as a streamed response body,
// for either API and split at arbitrary points, must end in a SampleOutput (a malformed event fails the sample
// with a message), never a crash or an exception; the texts that explain an HTTP failure take any status and body;
// an --endpoint URL is parsed or refused with an Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "bench/http_failure.h"
#include "bench/stream_protocol.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeserve::bench;
  if (size < 2) return 0;
  // Byte 0: the API and the size of the pieces the body arrives in (1 to 64 bytes); byte 1: an HTTP status.
  const HttpApi api = data[0] % 2 == 0 ? HttpApi::openai : HttpApi::sglang;
  const size_t piece = 1 + (data[0] >> 1) % 64;
  const int status = 100 + data[1] * 2;
  const std::string_view body(reinterpret_cast<const char*>(data + 2), size - 2);

  StreamDecoder decoder(api);
  for (size_t i = 0; i < body.size(); i += piece) decoder.feed(body.substr(i, piece));
  const SampleOutput out = decoder.finish();
  if (out.token_ids_known && out.token_count != static_cast<int64_t>(out.tokens.size())) __builtin_trap();

  const std::string text = http_status_text(status, {"/v1/completions", api, data[0] % 4 < 2}, body);
  if (text.size() > 1000) __builtin_trap();  // the server's body is cut short
  try {
    parse_endpoint(std::string(body));
  } catch (const moeserve::Error&) {
    // refused, with its reason
  }
  return 0;
}
