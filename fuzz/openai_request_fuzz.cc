// libFuzzer target: arbitrary bytes as the body of /v1/chat/completions, /v1/completions and /v1/responses,
// through the validation that turns a body into engine requests (server/engine_requests.h) with no engine
// behind it. Each either becomes engine requests that respect the limits (token ids inside the vocabulary, room
// for the output) or is refused with an ApiError of status 4xx; any other exception, a crash, a hang or
// unbounded memory is a finding. Seed corpus: tests/fixtures/openai_requests; dictionary: openai_request.dict.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/engine_requests.h"

namespace {

using namespace moeserve;
using namespace moeserve::server;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "openai_request_fuzz: %s\n", what);
    std::abort();
  }
}

const RequestContext& context() {
  static const auto tokenizer = Tokenizer::o200k_harmony();
  static const RequestContext ctx{*tokenizer, "fuzz", o200k::kLastSpecial + 1, 4096, {o200k::kReturn, o200k::kCall},
                                  RequestLimits{}, [] { return uint64_t{7}; }, nullptr};
  return ctx;
}

void check_spec(const RequestSpec& spec, const RequestContext& ctx) {
  check(!spec.prompt.empty(), "an engine request has an empty prompt");
  for (TokenId id : spec.prompt) check(id >= 0 && id < ctx.vocab_size, "a prompt token is outside the vocabulary");
  check(spec.max_tokens >= 1, "max_tokens is below 1");
  check(static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens <= ctx.max_sequence_tokens,
        "prompt plus max_tokens is over the limit");
}

template <typename Build>
void run(Build build) {
  try {
    build();
  } catch (const ApiError& e) {
    check(e.status() >= 400 && e.status() < 500, "a request error that is not a 4xx");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const RequestContext& ctx = context();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  run([&] { check_spec(chat_request(body, ctx).spec, ctx); });
  run([&] { check_spec(responses_request(body, ctx).spec, ctx); });
  run([&] {
    const CompletionRequest r = completion_request(body, ctx);
    check(!r.specs.empty(), "a completions request without engine requests");
    for (const RequestSpec& spec : r.specs) check_spec(spec, ctx);
  });
  return 0;
}
