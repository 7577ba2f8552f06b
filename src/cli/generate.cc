#include <fmt/core.h>
#include <fmt/ranges.h>

#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/runner_args.h"
#include "engine/generate.h"
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

}  // namespace

void register_generate(CLI::App& app) {
  struct Args {
    RunnerArgs runner;
    std::string tokens;
    GenerateOptions options;
    bool ignore_eos = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("generate", "generate tokens from a prompt of token ids");
  auto& o = args->options;
  add_runner_options(cmd, args->runner);
  cmd->add_option("--tokens", args->tokens, "prompt token ids, comma-separated")->required();
  cmd->add_option("--max-tokens", o.max_tokens, "tokens to generate at most")->capture_default_str();
  cmd->add_option("--temperature", o.sampling.temperature, "0 is greedy")->capture_default_str();
  cmd->add_option("--top-k", o.sampling.top_k, "0 disables")->capture_default_str();
  cmd->add_option("--top-p", o.sampling.top_p)->capture_default_str();
  cmd->add_option("--min-p", o.sampling.min_p)->capture_default_str();
  cmd->add_option("--seed", o.sampling.seed)->capture_default_str();
  cmd->add_flag("--ignore-eos", args->ignore_eos, "do not stop at the model's end-of-sequence tokens");
  cmd->callback([args] {
    OpenedRunner opened = open_runner(args->runner);
    ModelRunner& runner = *opened.runner;
    GenerateOptions options = args->options;
    if (!args->ignore_eos) options.stop_tokens = runner.config().eos_token_ids;
    std::vector<int32_t> prompt = parse_token_list(args->tokens);
    GenerateResult result = generate_sequence(runner, prompt, options);
    fmt::print("{}\n", fmt::join(result.tokens, ","));
    const double decode_tokens = static_cast<double>(result.tokens.size()) - 1;
    fmt::print(stderr, "prefill {} tokens in {:.3f} s ({:.1f} tok/s); decode {} tokens in {:.3f} s ({:.1f} tok/s)\n",
               prompt.size(), result.prefill_seconds, prompt.size() / result.prefill_seconds, decode_tokens,
               result.decode_seconds, decode_tokens > 0 ? decode_tokens / result.decode_seconds : 0.0);
  });
}

}  // namespace moeserve::cli
