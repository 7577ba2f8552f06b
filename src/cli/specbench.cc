// moeserve specbench: SPEED-Bench's acceptance-length measurement (eval/specbench.h) on the in-process engine
// with the speculation given by --speculative-config; prints a table per category and writes the numbers as JSON.
#include "eval/specbench.h"

#include <fmt/core.h>

#include <memory>

#include "bench/progress.h"
#include "cli/commands.h"
#include "cli/engine_args.h"
#include "cli/runner_args.h"
#include "engine/engine.h"
#include "eval/chat_format.h"
#include "harmony/message.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::cli {

void register_specbench(CLI::App& app) {
  struct Args {
    RunnerArgs runner;
    EngineArgs engine;
    std::string dataset;
    std::string reasoning = "low";
    int max_tokens = 4096;  // specdec_bench's --output_length default
    int concurrency = 0;
    int limit = 0;
    std::string output;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "specbench",
      "SPEED-Bench acceptance length: multi-turn conversations in the model's chat format at temperature 0 with "
      "speculation");
  add_runner_options(cmd, args->runner);
  add_engine_options(cmd, args->engine);
  cmd->add_option("--dataset", args->dataset,
                  "prepared SPEED-Bench parquet (question_id, category, turns) or JSON lines of that shape (MT-Bench)")
      ->required();
  cmd->add_option("--reasoning", args->reasoning, "reasoning effort of the Harmony system message (gpt-oss)")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->capture_default_str();
  cmd->add_option("--max-tokens", args->max_tokens, "tokens per turn at most")->capture_default_str();
  cmd->add_option("--concurrency", args->concurrency, "requests in flight (0: all of a turn at once)")
      ->capture_default_str();
  cmd->add_option("--limit", args->limit, "the first N questions only (0: all)")->capture_default_str();
  cmd->add_option("--output", args->output, "write the result as JSON here");
  cmd->callback([args] {
    MOESERVE_CHECK(args->max_tokens > 0, "specbench: --max-tokens must be positive");
    MOESERVE_CHECK(args->limit >= 0 && args->concurrency >= 0, "specbench: --limit and --concurrency must be >= 0");
    std::vector<eval::SpecBenchItem> items = eval::load_specbench_items(args->dataset);
    if (args->limit > 0 && static_cast<size_t>(args->limit) < items.size()) items.resize(args->limit);
    MOESERVE_CHECK(!args->runner.model.empty(), "specbench: --model is required (the tokenizer comes with it)");
    const auto tokenizer = Tokenizer::from_model_dir(args->runner.model);
    OpenedRunner opened = open_runner(args->runner);
    const EngineConfig settings = engine_config(args->engine, opened);
    MOESERVE_CHECK(settings.speculative.enabled(),
                   "specbench measures speculation: give --speculative-config (e.g. num_speculative_tokens 7)");
    Engine engine(std::shared_ptr<ModelRunner>(std::move(opened.runner)), settings);
    size_t turns = 0;
    for (const eval::SpecBenchItem& item : items) turns += item.turns.size();
    bench::WorkProgress progress("specbench: turns", turns);
    bench::ProgressLine line([&] { return progress.status(); }, bench::progress_mode(false));
    const eval::SpecBenchResult result =
        eval::run_specbench(items, *tokenizer, harmony::parse_reasoning_effort(args->reasoning),
                            eval::engine_turn_generator(engine, args->max_tokens, args->concurrency,
                                                        eval::EvalChatFormat(*tokenizer).stop_tokens(), &progress));
    line.finish();
    fmt::print("{}", result.table());
    size_t failed = 0;
    for (const auto& r : result.requests) failed += !r.error.empty();
    if (failed > 0) fmt::print(stderr, "moeserve: specbench: {} requests failed (see the JSON)\n", failed);
    if (!args->output.empty()) {
      nlohmann::json j = result.to_json();
      j["dataset"] = args->dataset;
      j["speculative_config"] = nlohmann::json::parse(args->engine.speculative_config);
      j["reasoning_effort"] = args->reasoning;
      j["max_tokens"] = args->max_tokens;
      write_text_file(args->output, j.dump(2) + "\n");
      fmt::print("wrote {}\n", args->output);
    }
  });
}

}  // namespace moeserve::cli
