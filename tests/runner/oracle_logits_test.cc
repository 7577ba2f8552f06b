// The CPU runner against transformers' GptOssForCausalLM (tests/fixtures/oracle, written by tools/oracle): logits
// at every position, for single prompts (one shot and in chunks over scattered KV blocks) and a batch of different
// lengths, and greedy continuations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "engine/generate.h"
#include "model/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"
#include "util/files.h"

namespace moeserve {
namespace {

const std::string kFixtureDir = std::string(MOESERVE_SOURCE_DIR) + "/tests/fixtures/oracle/";

struct Fixture {
  nlohmann::json meta;
  std::vector<float> values;
};

const Fixture& fixture() {
  static Fixture f = [] {
    Fixture f;
    f.meta = read_json_file(kFixtureDir + "oracle_logits.json");
    std::string bytes = read_text_file(kFixtureDir + "oracle_logits.bin");
    f.values.resize(bytes.size() / sizeof(float));
    std::memcpy(f.values.data(), bytes.data(), f.values.size() * sizeof(float));
    return f;
  }();
  return f;
}

// Regenerates the checkpoint with the recorded make-tiny arguments and checks every file's SHA-256, so that a
// change to make-tiny cannot silently invalidate the fixture.
std::string regenerate(const nlohmann::json& model) {
  std::string dir = testing::temp_dir("oracle");
  std::string command = std::string(MOESERVE_BINARY) + " make-tiny --out " + dir;
  for (const auto& arg : model["make_tiny_args"]) command += " " + arg.get<std::string>();
  auto result = testing::run_command(command);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const auto& [file, sha] : model["files"].items())
    EXPECT_EQ(sha256_file(dir + "/" + file), sha.get<std::string>()) << file << " differs from the oracle's checkpoint";
  return dir;
}

// Block tables that scatter a sequence over the pool: group g of sequence s takes blocks from a shuffled list.
struct ScatteredTables {
  std::vector<std::vector<std::vector<int32_t>>> tables;  // [sequence][group][logical block]
  ScatteredTables(int sequences, int groups, int blocks_each, uint32_t seed) {
    std::vector<int32_t> pool(sequences * groups * blocks_each);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
    size_t next = 0;
    tables.resize(sequences);
    for (auto& seq : tables) {
      seq.resize(groups);
      for (auto& table : seq)
        for (int b = 0; b < blocks_each; ++b) table.push_back(pool[next++]);
    }
  }
  std::vector<std::span<const int32_t>> spans(int s) const {
    std::vector<std::span<const int32_t>> out;
    for (const auto& t : tables[s]) out.emplace_back(t);
    return out;
  }
};

struct OracleCase {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> offsets;
  std::vector<std::vector<int32_t>> argmax;
};

OracleCase read_case(const nlohmann::json& c) {
  OracleCase out;
  for (const auto& s : c["sequences"]) {
    out.prompts.push_back(s["prompt"].get<std::vector<int32_t>>());
    out.offsets.push_back(s["offset"].get<int64_t>());
    out.argmax.push_back(s["argmax"].get<std::vector<int32_t>>());
  }
  return out;
}

// Compares our logits rows (whole vocabulary) with the oracle's rows (whole, or at the sampled ids).
void expect_rows_match(const std::vector<float>& ours, int64_t first_row, int64_t rows, int vocab,
                       const nlohmann::json& logit_ids, int64_t oracle_offset, const std::vector<int32_t>& argmax,
                       const std::string& label) {
  const bool all = logit_ids.is_string();
  std::vector<int32_t> ids;
  if (all) {
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
  } else {
    ids = logit_ids.get<std::vector<int32_t>>();
  }
  ASSERT_GE(ids.size(), all ? static_cast<size_t>(vocab) : size_t{1024});
  const auto& ref = fixture().values;
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = ours.data() + (first_row + r) * vocab;
    const float* expected = ref.data() + oracle_offset + r * ids.size();
    double diff = 0, norm = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      diff += std::pow(static_cast<double>(row[ids[j]]) - expected[j], 2);
      norm += std::pow(static_cast<double>(expected[j]), 2);
    }
    worst = std::max(worst, std::sqrt(diff / norm));
    EXPECT_LE(std::sqrt(diff / norm), 1e-3) << label << " position " << r;
    int32_t best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    EXPECT_EQ(best, argmax[r]) << label << " argmax at position " << r;
  }
  std::printf("%s: worst |ours - ref| / |ref| = %.2e over %lld positions\n", label.c_str(), worst,
              static_cast<long long>(rows));
}

class OracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleTest, LogitsMatchTransformersEverywhere) {
  const auto& model = fixture().meta["models"][GetParam()];
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(regenerate(model)));
  CpuRunner runner(checkpoint, 2);
  const int vocab = checkpoint->config().vocab_size;
  const int groups = kv_groups_of(checkpoint->config()).num_groups();
  const int block_size = 8;

  for (const auto& c : model["cases"]) {
    OracleCase oc = read_case(c);
    const std::string name = c["name"];
    const int n = static_cast<int>(oc.prompts.size());
    int longest = 0;
    for (const auto& p : oc.prompts) longest = std::max(longest, static_cast<int>(p.size()));
    const int blocks_each = (longest + block_size - 1) / block_size;
    runner.allocate_kv_cache({block_size, static_cast<int64_t>(n) * groups * blocks_each});

    // Every sequence of the case in one batch, all positions' logits.
    ScatteredTables tables(n, groups, blocks_each, 7);
    ForwardBatch batch;
    for (int s = 0; s < n; ++s) {
      SequenceStep step;
      step.tokens = oc.prompts[s];
      step.block_tables = tables.spans(s);
      step.num_logits = static_cast<int32_t>(oc.prompts[s].size());
      batch.sequences.push_back(step);
    }
    ForwardOutput out;
    runner.forward(batch, out);
    int64_t row = 0;
    for (int s = 0; s < n; ++s) {
      expect_rows_match(out.logits, row, oc.prompts[s].size(), vocab, model["logit_ids"], oc.offsets[s], oc.argmax[s],
                        GetParam() + "/" + name + " batched");
      row += oc.prompts[s].size();
    }

    // Each sequence alone in chunks of 5 over differently scattered blocks: prefix KV read back from the pages.
    ScatteredTables other(n, groups, blocks_each, 11);
    for (int s = 0; s < n; ++s) {
      std::vector<float> logits;
      const auto& prompt = oc.prompts[s];
      for (size_t begin = 0; begin < prompt.size(); begin += 5) {
        size_t end = std::min(prompt.size(), begin + 5);
        ForwardBatch chunk;
        SequenceStep step;
        step.tokens = std::span(prompt).subspan(begin, end - begin);
        step.start_position = static_cast<int32_t>(begin);
        step.block_tables = other.spans(s);
        step.num_logits = static_cast<int32_t>(end - begin);
        chunk.sequences.push_back(step);
        runner.forward(chunk, out);
        logits.insert(logits.end(), out.logits.begin(), out.logits.end());
      }
      expect_rows_match(logits, 0, prompt.size(), vocab, model["logit_ids"], oc.offsets[s], oc.argmax[s],
                        GetParam() + "/" + name + " chunked");
    }
  }
}

TEST_P(OracleTest, GreedyContinuationsMatchTransformers) {
  const auto& model = fixture().meta["models"][GetParam()];
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(regenerate(model)));
  CpuRunner runner(checkpoint, 2);
  for (const auto& g : model["greedy"]) {
    GenerateOptions options;
    options.sampling.temperature = 0.0f;
    options.max_tokens = static_cast<int>(g["tokens"].size());
    ASSERT_GE(options.max_tokens, 32);
    auto result = generate_sequence(runner, g["prompt"].get<std::vector<int32_t>>(), options);
    EXPECT_EQ(result.tokens, g["tokens"].get<std::vector<int32_t>>());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OracleTest, ::testing::Values("tiny", "tiny-small-vocab"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace moeserve
