// The tiny DeepSeek-V3 model end to end through the command line, as a user runs DeepSeek-R1: generate and chat
// with the reasoning printed apart (also speculating with the MTP head), bench --benchmark deepseek-r1 in the
// Server and Interactive scenarios in process and over HTTP (the accuracy log holding exactly the tokens the model
// generates), comply TEST06 on those logs, eval --rules deepseek-r1 (the log decoded with DeepSeek's tokenizer,
// and questions answered end to end), and specbench with the MTP head.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "chat/r1_chat.h"
#include "deepseek_test_util.h"
#include "engine/generate.h"
#include "eval/accuracy_log.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "server/openai_server.h"
#include "test_util.h"
#include "util/files.h"

namespace moeserve {
namespace {

constexpr const char* kMtp = R"('{"method":"mtp","num_speculative_tokens":3}')";

const std::string& model() {
  static const std::string dir = testing::tiny_deepseek_model();
  return dir;
}

std::shared_ptr<const deepseek_v3::Checkpoint> checkpoint() {
  static const auto c = std::shared_ptr<const deepseek_v3::Checkpoint>(deepseek_v3::Checkpoint::open(model()));
  return c;
}

const Tokenizer& tokenizer() {
  static const std::unique_ptr<Tokenizer> t = Tokenizer::from_model_dir(model());
  return *t;
}

testing::CommandResult moeserve(const std::string& arguments) {
  return testing::run_command(fmt::format("{} {} 2>&1", MOESERVE_BINARY, arguments));
}

// The greedy reply alone, stopping at the end of sentence.
std::vector<int32_t> greedy(const std::vector<int32_t>& prompt, int max_tokens) {
  DeepseekV3CpuRunner runner(checkpoint(), 2);
  GenerateOptions options;
  options.max_tokens = max_tokens;
  options.sampling.temperature = 0;
  options.stop_tokens = checkpoint()->config().eos_token_ids;
  return generate_sequence(runner, prompt, options).tokens;
}

TEST(DeepseekCli, GenerateAndChatPrintTheReasoningApart) {
  const std::vector<int32_t> prompt = chat::render_r1_user_prompt(tokenizer(), "What is 2+2?");
  const chat::R1Reply reply = chat::parse_r1_reply(tokenizer(), greedy(prompt, 10));
  const std::string expected = fmt::format("reasoning: {}\ncontent: {}\n", reply.reasoning, reply.content);
  for (const std::string& extra : {std::string(), std::string(" --speculative-config ") + kMtp}) {
    const auto run = moeserve(fmt::format("generate --model {} --prompt 'What is 2+2?' --max-tokens 10 --temperature 0 "
                                          "--threads 2{}",
                                          model(), extra));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find(expected), std::string::npos) << run.output;
  }
  const auto ids = moeserve(fmt::format("generate --model {} --tokens {} --max-tokens 10 --temperature 0", model(),
                                        fmt::join(prompt, ",")));
  ASSERT_EQ(ids.exit_code, 0) << ids.output;
  EXPECT_NE(ids.output.find(fmt::format("{}", fmt::join(greedy(prompt, 10), ","))), std::string::npos) << ids.output;
  const auto chat = testing::run_command(fmt::format("echo 'What is 2+2?' | {} chat --model {} --max-tokens 10 "
                                                     "--temperature 0 --threads 2 2>&1",
                                                     MOESERVE_BINARY, model()));
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  EXPECT_NE(chat.output.find("[reasoning] " + reply.reasoning), std::string::npos) << chat.output;
  EXPECT_NE(moeserve(fmt::format("generate --model {} --prompt x --reasoning low", model())).output.find(
                "--reasoning is Harmony's reasoning effort"),
            std::string::npos);
}

// Four token-id prompts as a JSONL dataset.
std::vector<std::vector<int32_t>> write_dataset(const std::string& path) {
  std::vector<std::vector<int32_t>> prompts;
  std::string lines;
  for (const char* question : {"What is 2+2?", "Name a prime.", "Say hi.", "Count to three."}) {
    prompts.push_back(chat::render_r1_user_prompt(tokenizer(), question));
    lines += nlohmann::json({{"input_tokens", prompts.back()}, {"dataset", "aime25"}, {"ground_truth", "4"}}).dump() + "\n";
  }
  write_text_file(path, lines);
  return prompts;
}

// The accuracy log of an accuracy-mode bench run: every sample's tokens are what the model generates alone.
void expect_log_is_the_models(const std::string& dir, const std::vector<std::vector<int32_t>>& prompts) {
  const auto log = eval::read_accuracy_log(dir + "/mlperf_log_accuracy.json");
  ASSERT_EQ(log.size(), prompts.size());
  for (const auto& entry : log) {
    const std::vector<int32_t> tokens = eval::hex_to_int32(entry.data);
    EXPECT_EQ(tokens, greedy(prompts.at(entry.qsl_idx), 8)) << dir << " qsl_idx " << entry.qsl_idx;
  }
}

std::string bench(const std::string& scenario, const std::string& source, const std::string& dataset,
                  const std::string& out) {
  const auto run = moeserve(fmt::format("bench --benchmark deepseek-r1 --scenario {} {} --dataset {} --accuracy "
                                        "--max-output-tokens 8 --output-dir {} --no-progress",
                                        scenario, source, dataset, out));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return run.output;
}

TEST(DeepseekCli, BenchServerAndInteractiveInProcessAndOverHttpThenTest06AndEval) {
  const std::string dir = testing::temp_dir("deepseek-cli");
  const auto prompts = write_dataset(dir + "/prompts.jsonl");
  const std::string in_process = fmt::format("--model {} --threads 2", model());
  bench("server", in_process, dir + "/prompts.jsonl", dir + "/server");
  expect_log_is_the_models(dir + "/server", prompts);
  bench("interactive", in_process + " --speculative-config " + kMtp, dir + "/prompts.jsonl", dir + "/interactive");
  expect_log_is_the_models(dir + "/interactive", prompts);
  {
    // Over HTTP against the OpenAI server on the same model.
    EngineConfig config;
    config.num_kv_blocks = 512;
    auto engine = std::make_shared<Engine>(std::make_shared<DeepseekV3CpuRunner>(checkpoint(), 2), config);
    server::ServerOptions options;
    options.http.port = 0;
    options.served_model_name = "tiny";
    server::OpenAiServer server(engine, Tokenizer::from_model_dir(model()), options);
    server.start();
    bench("server", fmt::format("--endpoint http://127.0.0.1:{}", server.port()), dir + "/prompts.jsonl", dir + "/http");
    server.shutdown();
  }
  expect_log_is_the_models(dir + "/http", prompts);

  for (const auto& [run, scenario] : {std::pair{"server", "Server"}, {"interactive", "Interactive"}}) {
    const auto test06 = moeserve(fmt::format("comply TEST06 -c {}/{} -o {}/{}-compliance --scenario {}", dir, run, dir,
                                             run, scenario));
    EXPECT_EQ(test06.exit_code, 0) << test06.output;
    EXPECT_NE(test06.output.find("TEST PASS"), std::string::npos) << test06.output;
  }

  // eval decodes DeepSeek-R1 logs with DeepSeek's tokenizer and reports MLPerf's two numbers.
  write_text_file(dir + "/reference.jsonl", R"({"dataset": "aime25", "ground_truth": "4"}
{"dataset": "aime25", "ground_truth": "2"}
{"dataset": "aime25", "ground_truth": "1"}
{"dataset": "aime25", "ground_truth": "3"}
)");
  const auto offline = moeserve(fmt::format("eval --rules deepseek-r1 --accuracy-log {}/server/mlperf_log_accuracy.json "
                                            "--reference {}/reference.jsonl --tokenizer {}",
                                            dir, dir, model()));
  ASSERT_EQ(offline.exit_code, 0) << offline.output;
  EXPECT_NE(offline.output.find("'tokens_per_sample'"), std::string::npos) << offline.output;
  EXPECT_NE(offline.output.find("'num-samples': 4"), std::string::npos) << offline.output;
  const auto no_tokenizer = moeserve(fmt::format(
      "eval --rules deepseek-r1 --accuracy-log {}/server/mlperf_log_accuracy.json --reference {}/reference.jsonl", dir,
      dir));
  EXPECT_NE(no_tokenizer.exit_code, 0);
  EXPECT_NE(no_tokenizer.output.find("give --tokenizer"), std::string::npos) << no_tokenizer.output;
}

TEST(DeepseekCli, EvalEndToEndAndSpecbenchWithTheMtpHead) {
  const std::string dir = testing::temp_dir("deepseek-cli-eval");
  const auto eval = moeserve(fmt::format("eval --rules deepseek-r1 --dataset aime25={}/tests/fixtures/eval/aime25_excerpt.jsonl "
                                         "--limit 2 --model {} --threads 2 --max-tokens 8 --temperature 0 "
                                         "--samples-out {}/samples.jsonl",
                                         MOESERVE_SOURCE_DIR, model(), dir));
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_NE(eval.output.find("aime25"), std::string::npos) << eval.output;
  write_text_file(dir + "/mt.jsonl", R"({"question_id": 1, "category": "writing", "turns": ["Hi", "More"]}
{"question_id": 2, "category": "math", "turns": ["2+2?"]}
)");
  const auto spec = moeserve(fmt::format("specbench --model {} --threads 2 --speculative-config {} --dataset "
                                         "{}/mt.jsonl --max-tokens 12 --output {}/result.json",
                                         model(), kMtp, dir, dir));
  ASSERT_EQ(spec.exit_code, 0) << spec.output;
  const nlohmann::json result = read_json_file(dir + "/result.json");
  ASSERT_EQ(result["requests"].size(), 2u);
  for (const auto& r : result["requests"]) {
    ASSERT_TRUE(r["acceptance_length"].is_number()) << r.dump();
    EXPECT_GE(r["acceptance_length"].get<double>(), 1.0);
    EXPECT_LE(r["acceptance_length"].get<double>(), 4.0);
  }
}

}  // namespace
}  // namespace moeserve
