#include <fmt/core.h>
#include <fmt/ranges.h>

#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/engine_args.h"
#include "chat/r1_chat.h"
#include "cli/runner_args.h"
#include "engine/generate.h"
#include "harmony/completion.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/parse.h"

namespace moeserve::cli {
namespace {

std::vector<int32_t> parse_token_list(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::optional<int64_t> value = parse_int(item);
    MOESERVE_CHECK(value && *value >= 0 && *value <= INT32_MAX, "--tokens: \"{}\" is not a token id", item);
    ids.push_back(static_cast<int32_t>(*value));
  }
  MOESERVE_CHECK(!ids.empty(), "--tokens: no token ids given");
  return ids;
}

// One request through the engine, which speculates (generate_sequence does not); timings as generate_sequence's.
GenerateResult generate_speculative(const OpenedRunner& opened, const std::vector<int32_t>& prompt,
                                    const GenerateOptions& options, const std::string& speculative_config) {
  EngineArgs engine_args;
  engine_args.speculative_config = speculative_config;
  EngineCore core(*opened.runner, engine_config(engine_args, opened));
  RequestSpec spec;
  spec.prompt = prompt;
  spec.sampling = options.sampling;
  spec.max_tokens = options.max_tokens;
  spec.stop_tokens = options.stop_tokens;
  GenerateResult result;
  std::optional<TimePoint> first;
  const TimePoint start = Clock::now();
  core.add_request(0, spec, [&](const RequestEvent& event) {
    MOESERVE_CHECK(event.finish != FinishReason::error, "generation failed: {}", event.error);
    if (!first) first = Clock::now();
    result.tokens.insert(result.tokens.end(), event.tokens.begin(), event.tokens.end());
    result.stopped = event.finish == FinishReason::stop;
  });
  while (core.has_work()) core.step();
  const TimePoint end = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(first.value_or(end) - start).count();
  result.decode_seconds = std::chrono::duration<double>(end - first.value_or(end)).count();
  const EngineMetrics m = core.metrics();
  fmt::print(stderr, "speculative decoding: acceptance length {:.3f} over {} verify steps, acceptance by position {}\n",
             m.spec_acceptance_length(), m.spec_drafts, m.spec_acceptance_rates());
  return result;
}

}  // namespace

void register_generate(CLI::App& app) {
  struct Args {
    RunnerArgs runner;
    std::string tokens;
    std::string prompt;
    std::string reasoning = "medium";
    GenerateOptions options;
    bool ignore_eos = false;
    std::string speculative_config;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate",
                                 "generate from token ids (printed as ids), or from a text prompt rendered with the "
                                 "model's chat format (Harmony, printed by channel; DeepSeek-R1's, reasoning apart "
                                 "from the answer)");
  auto& o = args->options;
  add_runner_options(cmd, args->runner);
  auto* tokens = cmd->add_option("--tokens", args->tokens, "prompt token ids, comma-separated");
  auto* text = cmd->add_option("--prompt", args->prompt,
                               "a user message, rendered with Harmony's system message (gpt-oss) or DeepSeek-R1's "
                               "chat template");
  tokens->excludes(text);
  cmd->add_option("--reasoning", args->reasoning, "reasoning effort for --prompt")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->capture_default_str();
  cmd->add_option("--max-tokens", o.max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", o.sampling.temperature, "0 is greedy")->capture_default_str();
  cmd->add_option("--top-k", o.sampling.top_k, "0 disables")->capture_default_str();
  cmd->add_option("--top-p", o.sampling.top_p)->capture_default_str();
  cmd->add_option("--min-p", o.sampling.min_p)->capture_default_str();
  cmd->add_option("--seed", o.sampling.seed)->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at the model's end-of-sequence tokens");
  cmd->add_option("--speculative-config", args->speculative_config,
                  "speculative decoding as JSON, as for serve (runs the request through the engine)");
  cmd->callback([args, cmd] {
    MOESERVE_CHECK(!args->tokens.empty() || !args->prompt.empty(), "give --tokens or --prompt");
    OpenedRunner opened = open_runner(args->runner);
    ModelRunner& runner = *opened.runner;
    GenerateOptions options = args->options;
    std::vector<int32_t> prompt;
    std::unique_ptr<Tokenizer> tokenizer;
    const bool r1 = opened.deepseek != nullptr;
    MOESERVE_CHECK(!r1 || cmd->count("--reasoning") == 0,
                   "--reasoning is Harmony's reasoning effort; DeepSeek-R1 always reasons first");
    if (!args->prompt.empty()) {
      tokenizer = args->runner.model.empty() ? Tokenizer::o200k_harmony() : Tokenizer::from_model_dir(args->runner.model);
      if (r1) {
        prompt = chat::render_r1_user_prompt(*tokenizer, args->prompt);
        options.stop_tokens = runner.config().eos_token_ids;
      } else {
        prompt = harmony::render_prompt(*tokenizer, args->prompt, harmony::parse_reasoning_effort(args->reasoning));
        options.stop_tokens = harmony::assistant_stop_tokens();
      }
    } else {
      prompt = parse_token_list(args->tokens);
      if (!args->ignore_eos) options.stop_tokens = runner.config().eos_token_ids;
    }
    GenerateResult result = args->speculative_config.empty()
                                ? generate_sequence(runner, prompt, options)
                                : generate_speculative(opened, prompt, options, args->speculative_config);
    if (tokenizer && r1) {
      const chat::R1Reply reply = chat::parse_r1_reply(*tokenizer, result.tokens);
      fmt::print("reasoning: {}\ncontent: {}\n", reply.reasoning, reply.content);
      if (!reply.stopped) fmt::print(stderr, "moeserve: the output was cut at --max-tokens {}\n", options.max_tokens);
    } else if (tokenizer) {
      const harmony::AssistantReply reply = harmony::parse_assistant_reply(*tokenizer, result.tokens);
      fmt::print("analysis: {}\nfinal: {}\n", reply.analysis, reply.final);
      if (reply.error)
        fmt::print(stderr, "moeserve: the output is not well-formed Harmony ({}); its text: {}\n", *reply.error,
                   tokenizer->decode(result.tokens));
      else if (!reply.stopped)
        fmt::print(stderr, "moeserve: the output was cut at --max-tokens {}\n", options.max_tokens);
    } else {
      fmt::print("{}\n", fmt::join(result.tokens, ","));
    }
    const double decode_tokens = static_cast<double>(result.tokens.size()) - 1;
    fmt::print(stderr, "prefill {} tokens in {:.3f} s ({:.1f} tok/s); decode {} tokens in {:.3f} s ({:.1f} tok/s)\n",
               prompt.size(), result.prefill_seconds, prompt.size() / result.prefill_seconds, decode_tokens,
               result.decode_seconds, decode_tokens > 0 ? decode_tokens / result.decode_seconds : 0.0);
  });
}

}  // namespace moeserve::cli
