// SPEED-Bench's protocol for speculative decoding (NVIDIA Model-Optimizer examples/specdec_bench; reference
// the nvidia/SPEED-Bench dataset, arXiv 2604.09557): every request is a categorised multi-turn
// conversation; each turn is rendered in the model's chat format (chat_format.h: Harmony, or DeepSeek-R1's
// template), with only the answer of earlier replies kept as history (Harmony's final channel, R1's text after
// </think>), and generated greedily (temperature 0) with the engine's speculation. The measure is the acceptance
// length: tokens per engine step, i.e. per streamed event, since the engine emits one event per verify step with
// every token it accepted. Request AL = the mean over all steps of all its turns, the first event of each turn
// (the prefill's token, which no draft produced) left out; category AL = the mean of its requests' ALs; the
// overall AL = the mean over all requests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bench/progress.h"
#include "engine/engine.h"
#include "harmony/message.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::eval {

struct SpecBenchItem {
  std::string question_id;
  std::string category;
  std::vector<std::string> turns;
};

// The prepared SPEED-Bench parquet (question_id, category, turns list<string>) or JSON lines with those fields
// (MT-Bench's question.jsonl; an integer question_id is read as text). Fails naming the file and row for a
// missing field, an empty turn list, or a turn still holding SPEED-Bench's "fetch from the source" placeholder.
std::vector<SpecBenchItem> load_specbench_items(const std::string& path);

// What one turn's generation gave: the tokens, and how many arrived in each streamed event, in order.
struct TurnOutput {
  std::vector<int32_t> tokens;
  std::vector<int> event_tokens;
  std::string error;  // set when the request failed
};
// Generates one turn for each prompt (they may run concurrently); outputs in prompt order.
using TurnGenerator = std::function<std::vector<TurnOutput>(const std::vector<std::vector<int32_t>>& prompts)>;

// Greedy generation on an in-process engine with its configured speculation, up to `concurrency` requests in
// flight (0: all), stopping at one of stop_tokens (the chat format's end of an assistant turn); each finished turn
// is counted in `progress` (may be null).
TurnGenerator engine_turn_generator(Engine& engine, int max_tokens, int concurrency, std::vector<int32_t> stop_tokens,
                                    bench::WorkProgress* progress = nullptr);

struct SpecBenchRequestResult {
  std::string question_id;
  std::string category;
  int turns = 0;
  int64_t steps = 0;   // events counted (after each turn's first)
  int64_t tokens = 0;  // tokens in them
  std::string error;   // a turn failed; the request is left out of the averages
  // tokens / steps; a request with no step past its turns' first events has none and is left out.
  std::optional<double> acceptance_length() const;
};

struct SpecBenchResult {
  std::vector<SpecBenchRequestResult> requests;
  struct Average {
    int requests = 0;  // with an acceptance length
    double acceptance_length = 0;
  };
  std::map<std::string, Average> categories;
  Average overall;

  nlohmann::json to_json() const;
  // A table of categories and the overall average, for the terminal.
  std::string table() const;
};

// Per-request steps and tokens from each turn's event sizes (the first event of a turn left out).
void count_turn_steps(const std::vector<int>& event_tokens, SpecBenchRequestResult& request);
// Category and overall means of the requests' acceptance lengths.
void average_acceptance(SpecBenchResult& result);

// Runs the protocol: turn t of every request goes out together, each rendered from its own history (Harmony's
// system message with `effort`, the user turns, and the answer of each earlier reply) in the tokenizer's format.
SpecBenchResult run_specbench(const std::vector<SpecBenchItem>& items, const Tokenizer& tokenizer,
                              harmony::ReasoningEffort effort, const TurnGenerator& generate);

}  // namespace moeserve::eval
