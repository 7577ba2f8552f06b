// What the HTTP SUT sends and how it reads the streamed answers, for the two APIs it speaks:
//
// openai  POST /v1/completions {"prompt": [token ids], "stream": true, "stream_options": {"include_usage": true},
//         "return_token_ids": true, ...}, answered by server-sent events `data: {"choices": [{"text": ..,
//         "token_ids": [..], "finish_reason": ..}]}` and a last `data: [DONE]`. `return_token_ids` is vLLM's
//         extension (`moeserve serve` honours it too): each chunk then carries its new token ids. Servers
//         without it send text only; the bench then counts tokens as the final `usage.completion_tokens` when the
//         server sends usage, else as the number of chunks that carry text (exact for servers that stream one
//         token per chunk, an undercount when they batch tokens). Such a sample has no token ids for the
//         accuracy log, which the detail log records as an error.
// sglang  POST /generate {"input_ids": [..], "sampling_params": {..}, "stream": true}, SGLang's native API that
//         the MLPerf reference harness uses, answered by `data: {"text": .., "output_ids": [..], "meta_info":
//         {"completion_tokens": n, "finish_reason": ..}}` events. As in the reference harness,
//         meta_info.completion_tokens is the authoritative running count (output_ids may be cumulative or, with
//         --stream-output, incremental) and the new ids are the last (count - seen) of output_ids.
//
// TTFT is the arrival of the first event that carries a token (ids or text); completion is the [DONE] event or
// the end of the body, whichever comes first.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "bench/sut.h"

namespace moeserve::bench {

enum class HttpApi { openai, sglang };
HttpApi parse_http_api(std::string_view name);  // "openai" or "sglang"

struct HttpEndpoint {
  std::string host;
  std::string port;
  std::string base_path;  // without a trailing '/', "" for the root
};
// "http://host[:port][/path]"; https is refused (the bench measures local servers).
HttpEndpoint parse_endpoint(const std::string& url);

// The request's path and JSON body for a sample. `model` is the OpenAI "model" field (unused by sglang).
std::string request_path(HttpApi api, const HttpEndpoint& endpoint);
std::string request_body(HttpApi api, const SampleRequest& sample, const std::string& model);

// Reads a streamed response body incrementally.
class StreamDecoder {
 public:
  explicit StreamDecoder(HttpApi api) : api_(api) {}

  struct Update {
    bool first_token = false;               // this feed carried the sample's first token
    std::optional<int32_t> first_token_id;  // its id, when the server sends ids
    bool done = false;                      // [DONE] seen: the sample is complete
  };
  // Feeds the next body bytes (any split: events may straddle calls).
  Update feed(std::string_view bytes);
  // The sample's output once the body ended (also without [DONE]).
  SampleOutput finish();

 private:
  void on_event(std::string_view data, Update& update);
  void on_openai(const nlohmann::json& chunk, Update& update);
  void on_sglang(const nlohmann::json& chunk, Update& update);
  void note_progress(Update& update);

  HttpApi api_;
  std::string pending_;  // bytes of an unfinished line
  bool done_ = false;
  bool ids_seen_ = false;
  bool ids_broken_ = false;  // sglang: the ids stopped adding up to the reported count
  std::vector<int32_t> tokens_;
  int64_t text_chunks_ = 0;
  std::optional<int64_t> reported_count_;  // usage.completion_tokens / meta_info.completion_tokens
  bool first_token_sent_ = false;
  std::string finish_reason_;
  std::string error_;
};

}  // namespace moeserve::bench
