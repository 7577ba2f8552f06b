// Reading the fixtures that tools/oracle writes on the GPU host (tests/fixtures/oracle/NAME.{json,bin}: metadata
// and float32 logits) and comparing a runner's logits with them, for the oracle tests of both model families.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "runner/runner.h"

namespace moeserve::testing {

struct OracleFixture {
  nlohmann::json meta;
  std::vector<float> values;
};

// The fixture NAME, read once per process; null when its files are not there.
const OracleFixture* oracle_fixture(const std::string& name);

// Regenerates a fixture model's checkpoint (`moeserve make-tiny EXTRA_ARGS` plus its recorded make_tiny_args) and
// checks every recorded file's SHA-256, so that a change to make-tiny cannot silently invalidate the fixture.
std::string regenerate_oracle_checkpoint(const nlohmann::json& model, const std::string& extra_args = "");

struct OracleCase {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> offsets;
  std::vector<std::vector<int32_t>> argmax;
};
OracleCase read_oracle_case(const nlohmann::json& c);

// The ids of a model's stored logits: the whole vocabulary ("all") or its sample.
std::vector<int32_t> oracle_logit_ids(const nlohmann::json& model);

// Compares our logits rows (whole vocabulary) with the fixture's rows at its ids: ||ours - ref|| / ||ref|| <= 1e-3
// at every row and the same argmax; prints the worst ratio.
void expect_oracle_rows(const OracleFixture& fixture, const std::vector<float>& ours, int64_t first_row, int64_t rows,
                        int vocab, const std::vector<int32_t>& ids, int64_t oracle_offset,
                        const std::vector<int32_t>& argmax, const std::string& label);

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

// One oracle case through `runner`: every sequence in one batch with all positions' logits, then each alone in
// chunks of 5 tokens over differently scattered blocks (the prefix read back from the pages), both against the
// oracle's rows ("LABEL batched", "LABEL chunked"). Allocates the runner's KV cache for the case.
void expect_oracle_case(ModelRunner& runner, const OracleFixture& fixture, const OracleCase& c, int groups,
                        int block_size, int vocab, const std::vector<int32_t>& ids, const std::string& label);

}  // namespace moeserve::testing
