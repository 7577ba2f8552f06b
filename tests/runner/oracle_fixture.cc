#include "runner/oracle_fixture.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>

#include "test_util.h"
#include "util/files.h"

namespace moeserve::testing {

const OracleFixture* oracle_fixture(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<OracleFixture>> loaded;
  std::lock_guard lock(mutex);
  if (auto it = loaded.find(name); it != loaded.end()) return it->second.get();
  const std::string base = std::string(MOESERVE_SOURCE_DIR) + "/tests/fixtures/oracle/" + name;
  std::unique_ptr<OracleFixture> f;
  if (file_exists(base + ".json") && file_exists(base + ".bin")) {
    f = std::make_unique<OracleFixture>();
    f->meta = read_json_file(base + ".json");
    const std::string bytes = read_text_file(base + ".bin");
    f->values.resize(bytes.size() / sizeof(float));
    std::memcpy(f->values.data(), bytes.data(), f->values.size() * sizeof(float));
  }
  return (loaded[name] = std::move(f)).get();
}

std::string regenerate_oracle_checkpoint(const nlohmann::json& model, const std::string& extra_args) {
  const std::string dir = temp_dir("oracle");
  std::string command = fmt::format("{} make-tiny --out {}{}", MOESERVE_BINARY, dir, extra_args);
  for (const auto& arg : model["make_tiny_args"]) fmt::format_to(std::back_inserter(command), " {}", arg.get<std::string>());
  const auto result = run_command(command);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const auto& [file, sha] : model["files"].items())
    EXPECT_EQ(sha256_file(dir + "/" + file), sha.get<std::string>()) << file << " differs from the oracle's checkpoint";
  return dir;
}

OracleCase read_oracle_case(const nlohmann::json& c) {
  OracleCase out;
  for (const auto& s : c["sequences"]) {
    out.prompts.push_back(s["prompt"].get<std::vector<int32_t>>());
    out.offsets.push_back(s["offset"].get<int64_t>());
    out.argmax.push_back(s["argmax"].get<std::vector<int32_t>>());
  }
  return out;
}

std::vector<int32_t> oracle_logit_ids(const nlohmann::json& model) {
  if (!model["logit_ids"].is_string()) return model["logit_ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> ids(model["vocab_size"].get<int>());
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

void expect_oracle_rows(const OracleFixture& fixture, const std::vector<float>& ours, int64_t first_row, int64_t rows,
                        int vocab, const std::vector<int32_t>& ids, int64_t oracle_offset,
                        const std::vector<int32_t>& argmax, const std::string& label) {
  ASSERT_GE(ids.size(), std::min<size_t>(vocab, 1024));
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = ours.data() + (first_row + r) * vocab;
    const float* expected = fixture.values.data() + oracle_offset + r * ids.size();
    double diff = 0, norm = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      diff += std::pow(static_cast<double>(row[ids[j]]) - expected[j], 2);
      norm += std::pow(static_cast<double>(expected[j]), 2);
    }
    worst = std::max(worst, std::sqrt(diff / norm));
    EXPECT_LE(std::sqrt(diff / norm), 1e-3) << label << " position " << r;
    const int32_t best = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    EXPECT_EQ(best, argmax[r]) << label << " argmax at position " << r;
  }
  std::printf("%s: worst |ours - ref| / |ref| = %.2e over %lld positions\n", label.c_str(), worst,
              static_cast<long long>(rows));
}

void expect_oracle_case(ModelRunner& runner, const OracleFixture& fixture, const OracleCase& c, int groups,
                        int block_size, int vocab, const std::vector<int32_t>& ids, const std::string& label) {
  const int n = static_cast<int>(c.prompts.size());
  size_t longest = 0;
  for (const auto& p : c.prompts) longest = std::max(longest, p.size());
  const int blocks_each = static_cast<int>((longest + block_size - 1) / block_size);
  runner.allocate_kv_cache({block_size, static_cast<int64_t>(n) * groups * blocks_each});

  ScatteredTables tables(n, groups, blocks_each, 7);
  ForwardBatch batch;
  for (int s = 0; s < n; ++s) {
    SequenceStep step;
    step.tokens = c.prompts[s];
    step.block_tables = tables.spans(s);
    step.num_logits = static_cast<int32_t>(c.prompts[s].size());
    batch.sequences.push_back(step);
  }
  ForwardOutput out;
  runner.forward(batch, out);
  int64_t row = 0;
  for (int s = 0; s < n; ++s) {
    expect_oracle_rows(fixture, out.logits, row, c.prompts[s].size(), vocab, ids, c.offsets[s], c.argmax[s],
                       label + " batched");
    row += static_cast<int64_t>(c.prompts[s].size());
  }

  ScatteredTables other(n, groups, blocks_each, 11);
  for (int s = 0; s < n; ++s) {
    std::vector<float> logits;
    const auto& prompt = c.prompts[s];
    for (size_t begin = 0; begin < prompt.size(); begin += 5) {
      const size_t end = std::min(prompt.size(), begin + 5);
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
    expect_oracle_rows(fixture, logits, 0, prompt.size(), vocab, ids, c.offsets[s], c.argmax[s], label + " chunked");
  }
}

}  // namespace moeserve::testing
