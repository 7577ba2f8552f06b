// Where `moeserve eval` gets completions: an abstract source of model replies to Harmony conversations, so that
// the evaluation does not care whether the model runs in this process or behind an endpoint. The conversation is
// rendered in the model's chat format (chat_format.h: Harmony, or DeepSeek-R1's template).
//
// A completion's text is the reply as MLPerf's scorer reads it: for gpt-oss the generated tokens decoded with
// special tokens kept by name ("<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final..."),
// for DeepSeek-R1 with them skipped.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/progress.h"
#include "bench/sut_http.h"
#include "engine/engine.h"
#include "eval/chat_format.h"
#include "harmony/message.h"
#include "sampling/sampling_params.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::eval {

struct CompletionRequest {
  harmony::Conversation conversation;
  SamplingParams sampling;
  int max_tokens = 32768;  // MLPerf's accuracy runs: max_new_tokens 32768
};

struct Completion {
  std::string text;
  int64_t tokens = 0;
  bool stopped = false;  // ended on a stop token of the format (else it was cut at max_tokens, or failed)
  std::string error;     // set when the request failed
};

class CompletionSource {
 public:
  virtual ~CompletionSource() = default;
  virtual std::string describe() const = 0;
  // All requests, in any order or concurrently; replies in request order. Each finished request is counted in
  // `progress` (may be null) as it finishes.
  virtual std::vector<Completion> complete(const std::vector<CompletionRequest>& requests,
                                           bench::WorkProgress* progress) = 0;
};

// The in-process engine (engine.h) on a runner: every request submitted at once, so the scheduler batches them.
class EngineCompletionSource : public CompletionSource {
 public:
  EngineCompletionSource(std::shared_ptr<ModelRunner> runner, std::shared_ptr<const Tokenizer> tokenizer,
                         EngineConfig config);
  std::string describe() const override;
  std::vector<Completion> complete(const std::vector<CompletionRequest>& requests,
                                   bench::WorkProgress* progress) override;

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  EvalChatFormat format_;
  std::string runner_name_;
  Engine engine_;
};

// An HTTP endpoint through the bench's client (bench/sut_http.h): `moeserve serve`, vLLM or TensorRT-LLM over
// OpenAI /v1/completions with token ids, or SGLang's /generate, as MLPerf's harness talks to its server. The
// prompt is rendered here and sent as token ids; the reply's token ids are decoded here. A server that returns
// text without token ids cannot be scored (the sample fails, saying so).
class HttpCompletionSource : public CompletionSource {
 public:
  HttpCompletionSource(bench::HttpSutOptions options, std::shared_ptr<const Tokenizer> tokenizer);
  std::string describe() const override;
  std::vector<Completion> complete(const std::vector<CompletionRequest>& requests,
                                   bench::WorkProgress* progress) override;

 private:
  bench::HttpSutOptions options_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  EvalChatFormat format_;
};

}  // namespace moeserve::eval
