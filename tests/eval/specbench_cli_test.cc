// `moeserve specbench` end to end on the tiny model with its tiny EAGLE-3 head (made by `make-tiny --eagle3`):
// chain and tree speculation, the JSON result, the printed table.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "test_util.h"
#include "util/files.h"

namespace moeserve::eval {
namespace {

TEST(SpecBench, EndToEndOnTheTinyModelWithItsTinyDraftHead) {
  const std::string target = moeserve::testing::tiny_model();
  const std::string dir = moeserve::testing::temp_dir("specbench-e2e");
  auto made = moeserve::testing::run_command(fmt::format("{} make-tiny --eagle3 --target {} --out {}/draft",
                                                         MOESERVE_BINARY, target, dir));
  ASSERT_EQ(made.exit_code, 0) << made.output;
  write_text_file(dir + "/mt.jsonl", R"({"question_id": 1, "category": "writing", "turns": ["Hi", "More"]}
{"question_id": 2, "category": "math", "turns": ["2+2?"]}
{"question_id": 3, "category": "math", "turns": ["3+3?", "And 4+4?"]}
)");
  for (const std::string shape : {R"("num_speculative_tokens": 3)",
                                  R"("num_speculative_tokens": 3, "speculative_eagle_topk": 2, )"
                                  R"("speculative_num_draft_tokens": 6)"}) {
    const std::string config = fmt::format(R"({{"method": "eagle3", "model": "{}/draft", {}}})", dir, shape);
    auto run = moeserve::testing::run_command(
        fmt::format("{} specbench --model {} --threads 2 --speculative-config '{}' --dataset {}/mt.jsonl "
                    "--max-tokens 12 --output {}/result.json",
                    MOESERVE_BINARY, target, config, dir, dir));
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("overall"), std::string::npos) << run.output;
    const nlohmann::json result = read_json_file(dir + "/result.json");
    ASSERT_EQ(result["requests"].size(), 3u);
    for (const auto& r : result["requests"]) {
      EXPECT_FALSE(r.contains("error")) << r.dump();
      ASSERT_TRUE(r["acceptance_length"].is_number()) << r.dump();
      // Every verify step emits 1 to k + 1 tokens.
      EXPECT_GE(r["acceptance_length"].get<double>(), 1.0);
      EXPECT_LE(r["acceptance_length"].get<double>(), 4.0);
    }
    EXPECT_EQ(result["categories"]["math"]["requests"], 2);
    EXPECT_EQ(result["speculative_config"]["num_speculative_tokens"], 3);
  }
}

}  // namespace
}  // namespace moeserve::eval
