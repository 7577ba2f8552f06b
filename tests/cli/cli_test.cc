// The first things a user meets, through the moeserve binary: make-tiny does not write over a directory unless
// told to, and names original-layout shards as OpenAI does; --model naming a file, a KV cache that cannot hold one
// sequence of --max-model-len and --device cuda without a GPU each fail at start saying what is wrong; acceptance by
// position reads zeros when nothing was accepted; vLLM's flag names, positional model and "did you mean".
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "test_util.h"
#include "util/files.h"

namespace moeserve {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

testing::CommandResult moeserve(const std::string& arguments) {
  return testing::run_command(std::string(MOESERVE_BINARY) + " " + arguments);
}

TEST(MakeTinyCli, RefusesANonEmptyDirectoryUnlessForced) {
  const std::string dir = testing::temp_dir("make-tiny-cli") + "/model";
  const auto first = moeserve("make-tiny --out " + dir);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto again = moeserve("make-tiny --out " + dir + " --seed 2");
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.output, HasSubstr("make-tiny --out " + dir + ": the directory is not empty"));
  EXPECT_THAT(again.output, HasSubstr("pass --force"));
  EXPECT_TRUE(file_exists(dir + "/model.safetensors"));  // untouched

  // --force writes the new checkpoint and drops the old one's weights, so the loader sees only the new files.
  const auto forced = moeserve("make-tiny --out " + dir + " --force --layout original --shards 2");
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_FALSE(file_exists(dir + "/model.safetensors"));
  // OpenAI's original/ folder names its shards model--00001-of-00007.safetensors (gpt-oss-120b).
  EXPECT_TRUE(file_exists(dir + "/model--00001-of-00002.safetensors"));
  EXPECT_TRUE(file_exists(dir + "/model--00002-of-00002.safetensors"));
  EXPECT_THAT(read_text_file(dir + "/model.safetensors.index.json"), HasSubstr("model--00002-of-00002.safetensors"));
  const auto loads = moeserve("generate --model " + dir + " --tokens 200006,17360 --max-tokens 2 --temperature 0");
  EXPECT_EQ(loads.exit_code, 0) << loads.output;

  const std::string file = dir + "/config.json";
  const auto onto_a_file = moeserve("make-tiny --out " + file);
  EXPECT_EQ(onto_a_file.exit_code, 1);
  EXPECT_THAT(onto_a_file.output, HasSubstr("a file of that name exists"));
}

TEST(ServeCli, AModelFileIsNotADirectory) {
  const std::string config = testing::tiny_model() + "/config.json";
  const auto result = moeserve("serve --model " + config);
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("--model " + config + " is a file, not a directory: give the model directory"));
  EXPECT_THAT(result.output, Not(HasSubstr("does not exist")));
}

TEST(ServeCli, AKvCacheThatCannotHoldOneSequenceRefusesToStart) {
  const std::string model = testing::tiny_model();
  // The tiny model's context is 131072 tokens: 8197 blocks of 16 (its sliding layers keep only their window).
  const auto small = moeserve("serve --model " + model + " --kv-cache-size 16MiB");
  EXPECT_EQ(small.exit_code, 1);
  EXPECT_THAT(small.output, HasSubstr("the KV cache (512 blocks of 16 tokens, 16.0 MiB) cannot hold one sequence of "
                                      "131072 tokens"));
  EXPECT_THAT(small.output, HasSubstr("which needs 8197 blocks (256.2 MiB): give --kv-cache-size 257MiB or more, or "
                                      "a smaller --max-model-len"));
  // The same cache with a shorter --max-model-len runs (a bench, which ends by itself).
  const std::string dir = testing::temp_dir("kv-max-model-len");
  const auto bounded = moeserve("bench --model " + model +
                                " --kv-cache-size 16MiB --max-model-len 4096 --dataset synthetic --synthetic-samples 2 "
                                "--synthetic-input 8 --synthetic-output 4 --accuracy --scenario offline --no-progress "
                                "--output-dir " +
                                dir);
  EXPECT_EQ(bounded.exit_code, 0) << bounded.output;
}

TEST(RunnerCli, DeviceCudaWithoutAGpuSaysThereIsNone) {
  const auto result =
      moeserve("generate --model " + testing::tiny_model() + " --device cuda --tokens 1,2 --max-tokens 1");
  if (result.exit_code == 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(result.exit_code, 1);
  // A build without CUDA says so; a CUDA build on a machine without a GPU or driver says there is no device, not
  // that the (absent) driver is too old.
  EXPECT_THAT(result.output, ::testing::AnyOf(HasSubstr("--device cuda: moeserve was built without CUDA"),
                                              HasSubstr("--device cuda: no CUDA device found")));
  EXPECT_THAT(result.output, Not(HasSubstr("insufficient")));
}

TEST(RunnerCli, AMoePathTableIsCheckedAndNeedsTheCudaRunner) {
  const std::string model = testing::tiny_model();
  const auto cpu = moeserve("generate " + model + " --moe-path-table decode-mma-n16 --tokens 1,2 --max-tokens 1");
  EXPECT_EQ(cpu.exit_code, 1);
  EXPECT_THAT(cpu.output, HasSubstr("--moe-path-table needs --device cuda"));
  // A bad table is named before any device is opened.
  const auto bad = moeserve("generate " + model +
                            " --device cuda --moe-path-table decode-mma-n16:8,decode-x1:4,prefill-wgmma --tokens 1,2 "
                            "--max-tokens 1");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("--moe-path-table entry \"decode-x1:4\": bounds must increase"));
}

TEST(GenerateCli, AcceptanceByPositionIsZeroWhenNothingWasAccepted) {
  // The test_random drafter proposes random tokens of the 201,088-token vocabulary: the target accepts none.
  const auto result = moeserve("generate --model " + testing::tiny_model() +
                               " --tokens 200006,17360,200008 --max-tokens 8 --temperature 0 --speculative-config "
                               "'{\"method\":\"test_random\",\"num_speculative_tokens\":3}'");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("acceptance length 1.000"));
  EXPECT_THAT(result.output, HasSubstr("acceptance by position [0, 0, 0]"));
}

// Every flag the README's command examples use exists: each `build/moeserve COMMAND [SUBCOMMAND] ...` line of a
// code block, with its continuation lines, against `moeserve COMMAND [SUBCOMMAND] --help` (a subcommand is a
// lower-case word after the command: `bench compare`).
TEST(Readme, EveryFlagOfTheExamplesExists) {
  std::istringstream readme(read_text_file(MOESERVE_SOURCE_DIR "/README.md"));
  std::map<std::string, std::set<std::string>> flags;
  const std::regex command_line(R"(^    build/moeserve ([a-z-]+(?: [a-z][a-z-]*(?= |$))?)(.*))");
  const std::regex flag(R"(--[a-z0-9][a-z0-9-]*)");
  std::string command;
  for (std::string line; std::getline(readme, line);) {
    std::smatch m;
    std::string rest;
    if (std::regex_match(line, m, command_line)) {
      command = m[1];
      rest = m[2];
    } else if (!command.empty() && line.rfind("        ", 0) == 0) {
      rest = line;
    } else {
      command.clear();
      continue;
    }
    for (std::sregex_iterator it(rest.begin(), rest.end(), flag), end; it != end; ++it)
      flags[command].insert(it->str());
  }
  ASSERT_GE(flags.size(), 8u);
  EXPECT_TRUE(flags["bench"].contains("--max-consecutive-failures"));  // continuation lines are read
  EXPECT_TRUE(flags["bench compare"].contains("--output"));            // and subcommands
  for (const auto& [name, used] : flags) {
    const auto help = moeserve(name + " --help");
    ASSERT_EQ(help.exit_code, 0) << name;
    for (const std::string& f : used)  // the whole flag, not a prefix of a longer one
      EXPECT_TRUE(std::regex_search(help.output, std::regex(f + "(?![a-z0-9-])")))
          << "README: moeserve " << name << " " << f;
  }
}

// vLLM's command line: the model directory as the first argument, vLLM's flag names, the old names still
// working with one deprecation line each, and "did you mean" for a mistyped flag.
size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A short in-process bench that ends by itself; returns its moeserve_result.json's engine description.
nlohmann::json bench_engine(const std::string& flags, testing::CommandResult& result,
                            const std::string& scenario = "offline") {
  const std::string dir = testing::temp_dir("vllm-flags");
  result = moeserve("bench " + testing::tiny_model() + " --kv-cache-size 16MiB --max-model-len 512 " + flags +
                    " --dataset synthetic --synthetic-samples 2 --synthetic-input 8 --synthetic-output 2 --accuracy "
                    "--scenario " + scenario + " --no-progress --output-dir " + dir);
  if (result.exit_code != 0) return nullptr;
  return nlohmann::json::parse(read_text_file(dir + "/moeserve_result.json"))["reproducibility"]["system_under_test"]["engine"];
}

TEST(VllmFlags, TheModelDirectoryMayComeFirst) {
  const auto result = moeserve("generate " + testing::tiny_model() + " --tokens 200006,17360 --max-tokens 2 --temperature 0");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  const auto both = moeserve("generate " + testing::tiny_model() + " --model " + testing::tiny_model() + " --tokens 1");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.output, HasSubstr("--model excludes model"));
}

TEST(VllmFlags, VllmNamesSetTheEngine) {
  testing::CommandResult result;
  const auto engine = bench_engine("--max-num-batched-tokens 64 --max-num-seqs 3 --no-enable-prefix-caching", result);
  ASSERT_FALSE(engine.is_null()) << result.output;
  EXPECT_EQ(engine["max_batched_tokens"], 64);
  EXPECT_EQ(engine["max_num_seqs"], 3);
  EXPECT_EQ(engine["prefix_caching"], false);
  EXPECT_THAT(result.output, Not(HasSubstr("deprecated")));
}

TEST(VllmFlags, OldNamesStillWorkAndSaySoOnce) {
  testing::CommandResult result;
  const auto engine = bench_engine(
      "--max-batched-tokens 32 --no-prefix-caching --precision f32 --ttft-target 2", result);
  ASSERT_FALSE(engine.is_null()) << result.output;
  EXPECT_EQ(engine["max_batched_tokens"], 32);
  EXPECT_EQ(engine["prefix_caching"], false);
  EXPECT_EQ(occurrences(result.output, "warning: --max-batched-tokens is deprecated: use --max-num-batched-tokens"), 1u);
  EXPECT_EQ(occurrences(result.output, "warning: --no-prefix-caching is deprecated: use --no-enable-prefix-caching"), 1u);
  EXPECT_EQ(occurrences(result.output, "warning: --precision is deprecated: use --dtype"), 1u);
  EXPECT_EQ(occurrences(result.output, "warning: --ttft-target is deprecated: use --ttft-target-ms"), 1u);
}

// The slo scheduler aims at the run's own latency bounds (mlperf.conf: gpt-oss-120b Server 3 s / 80 ms,
// gpt-oss-120b-interactive 2 s / 15 ms) unless the targets are given.
TEST(BenchSloTargets, FollowTheScenarioUnlessGiven) {
  struct Case {
    std::string scenario, flags;
    double ttft, tpot;
  };
  for (const Case& c : {Case{"interactive", "", 2.0, 0.015}, Case{"server", "", 3.0, 0.080},
                        Case{"interactive", "--tpot-target-ms 30", 2.0, 0.030},
                        Case{"server", "--ttft-target-ms 1500", 1.5, 0.080}}) {
    testing::CommandResult result;
    const auto engine = bench_engine("--benchmark gpt-oss-120b --scheduler slo " + c.flags, result, c.scenario);
    ASSERT_FALSE(engine.is_null()) << c.scenario << " " << c.flags << ": " << result.output;
    EXPECT_DOUBLE_EQ(engine["slo_targets"]["ttft_seconds"].get<double>(), c.ttft) << c.scenario << " " << c.flags;
    EXPECT_DOUBLE_EQ(engine["slo_targets"]["tpot_seconds"].get<double>(), c.tpot) << c.scenario << " " << c.flags;
  }
}

// The slo scheduler projects a request that may stop early to --slo-expected-output-tokens, else to lengths learnt
// from finished requests; the result records which.
TEST(BenchSloTargets, ExpectedOutputTokensAreLearntUnlessGiven) {
  using Case = std::pair<std::string, nlohmann::json>;  // flags, the result's expected_output_tokens
  for (const auto& [flags, expected] : {Case{"", "learnt"}, Case{"--slo-expected-output-tokens 1500", 1500}}) {
    testing::CommandResult result;
    const auto engine = bench_engine("--benchmark gpt-oss-120b --scheduler slo " + flags, result, "interactive");
    ASSERT_FALSE(engine.is_null()) << flags << ": " << result.output;
    EXPECT_EQ(engine["slo_targets"]["expected_output_tokens"], expected) << flags;
  }
  const auto zero = moeserve("serve " + testing::tiny_model() + " --scheduler slo --slo-expected-output-tokens 0");
  EXPECT_EQ(zero.exit_code, 2) << zero.output;
  EXPECT_THAT(zero.output, HasSubstr("--slo-expected-output-tokens"));
}

TEST(VllmFlags, DtypeTakesVllmsNames) {
  for (const char* dtype : {"auto", "bfloat16", "float32"}) {
    const auto result = moeserve(std::string("generate ") + testing::tiny_model() + " --dtype " + dtype +
                                 " --tokens 200006 --max-tokens 1 --temperature 0");
    EXPECT_EQ(result.exit_code, 0) << dtype << ": " << result.output;
  }
  const auto half = moeserve("generate " + testing::tiny_model() + " --dtype float16 --tokens 1 --max-tokens 1");
  EXPECT_EQ(half.exit_code, 2);
  EXPECT_THAT(half.output, HasSubstr("float16"));
}

TEST(VllmFlags, GpuMemoryUtilizationNeedsAGpuRunner) {
  const auto result = moeserve("serve " + testing::tiny_model() + " --port 0 --gpu-memory-utilization 0.5");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("--gpu-memory-utilization needs a GPU runner"));
}

TEST(VllmFlags, AnUnknownFlagGetsTheNearestKnownOne) {
  const auto typo = moeserve("serve " + testing::tiny_model() + " --max-num-seq 4");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_THAT(typo.output, HasSubstr("moeserve serve: unknown flag --max-num-seq; did you mean --max-num-seqs?"));
  const auto spelling = moeserve("serve " + testing::tiny_model() + " --gpu-memory-utilisation=0.8");
  EXPECT_THAT(spelling.output, HasSubstr("did you mean --gpu-memory-utilization?"));
  const auto bench = moeserve("bench --dataset synthetic --senario offline");
  EXPECT_EQ(bench.exit_code, 2);
  EXPECT_THAT(bench.output, HasSubstr("moeserve bench: unknown flag --senario; did you mean --scenario?"));
  // Nothing near: CLI11's own message only.
  const auto far = moeserve("serve " + testing::tiny_model() + " --frobnicate-widgets");
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_THAT(far.output, HasSubstr("--frobnicate-widgets"));
  EXPECT_THAT(far.output, Not(HasSubstr("did you mean")));
}

}  // namespace
}  // namespace moeserve

namespace moeserve {
namespace {

// The last line of a command's output: generate prints the generated ids there.
std::string last_line(const std::string& output) {
  std::string trimmed = output;
  while (!trimmed.empty() && trimmed.back() == '\n') trimmed.pop_back();
  return trimmed.substr(trimmed.find_last_of('\n') + 1);
}

TEST(TensorParallelCli, SplitRunsGenerateTheSameTokensAsOneRank) {
  const std::string base = "generate " + testing::tiny_model() + " --tokens 200006,17360,200008,1000,2000 --ignore-eos ";
  for (const std::string sampling : {"--max-tokens 24 --temperature 0", "--max-tokens 12 --temperature 0.8 --seed 5"}) {
    const auto one = moeserve(base + sampling);
    ASSERT_EQ(one.exit_code, 0) << one.output;
    ASSERT_THAT(last_line(one.output), ::testing::MatchesRegex("[0-9]+(,[0-9]+)+"));
    for (const std::string split : {"--tensor-parallel-size 2", "--tp-size 2 --enable-expert-parallel"}) {
      const auto many = moeserve(base + sampling + " " + split);
      ASSERT_EQ(many.exit_code, 0) << many.output;
      EXPECT_EQ(last_line(many.output), last_line(one.output)) << sampling << " " << split;
    }
  }
  // Through the engine's speculative path: verify steps of several tokens on the split runner.
  const std::string speculative =
      " --max-tokens 10 --temperature 0 --speculative-config '{\"method\":\"test_random\",\"num_speculative_tokens\":3}'";
  const auto one = moeserve(base + speculative);
  const auto many = moeserve(base + speculative + " --tensor-parallel-size 2");
  ASSERT_EQ(many.exit_code, 0) << many.output;
  EXPECT_EQ(last_line(many.output), last_line(one.output));
}

TEST(TensorParallelCli, DeepseekSplitsByExpertsAndGivesTheSameTokens) {
  const std::string dir = testing::temp_dir("deepseek-ep") + "/model";
  const auto made = moeserve("make-tiny --family deepseek-v3 --out " + dir);
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string base = "generate " + dir + " --tokens 1,2,3,4 --max-tokens 12 --temperature 0 --ignore-eos";
  const auto one = moeserve(base);
  const auto many = moeserve(base + " --tensor-parallel-size 2 --enable-expert-parallel");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(many.exit_code, 0) << many.output;
  EXPECT_EQ(last_line(many.output), last_line(one.output));
  const auto heads = moeserve(base + " --tensor-parallel-size 2");
  EXPECT_EQ(heads.exit_code, 1);
  EXPECT_THAT(heads.output, HasSubstr("split by experts only so far: add --enable-expert-parallel"));
}

TEST(TensorParallelCli, SplitsTheModelCannotTakeFailAtStart) {
  const std::string base = "generate " + testing::tiny_model() + " --tokens 1,2 --max-tokens 1 ";
  // The CUDA runner's split is checked the same way, before any device is opened.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--tensor-parallel-size 3", "Total number of key-value heads (2) must be divisible by tensor parallel size (3)"},
      {"--tensor-parallel-size 3 --device cuda", "must be divisible by tensor parallel size (3)"},
      {"--enable-expert-parallel", "give a size above 1"},
      {"--tensor-parallel-size 0", "--tensor-parallel-size"}};
  for (const auto& [flags, message] : cases) {
    const auto result = moeserve(base + flags);
    EXPECT_NE(result.exit_code, 0) << flags;
    EXPECT_THAT(result.output, HasSubstr(message)) << flags;
  }
}

}  // namespace
}  // namespace moeserve
