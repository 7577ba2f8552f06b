#include "engine/speculative/speculative_config.h"

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_fields.h"
#include "util/json_parse.h"

namespace moeserve::speculative {
namespace {

int integer_field(const nlohmann::json& value, const std::string& key) {
  MOESERVE_CHECK(value.is_number_integer(), "--speculative-config: \"{}\" must be an integer, got {}", key, value.dump());
  return json_value_as<int>(value, "--speculative-config", key);
}

}  // namespace

DraftShape SpeculativeConfig::shape() const {
  DraftShape shape;
  shape.num_draft_tokens = num_speculative_tokens;
  shape.top_k = eagle_topk;
  shape.total_tokens = eagle_topk == 1 ? 0 : num_draft_tokens - 1;
  return shape;
}

void validate_draft_shape(const DraftShape& shape) {
  MOESERVE_CHECK(shape.num_draft_tokens >= 0, "draft length {} must be >= 0", shape.num_draft_tokens);
  MOESERVE_CHECK(shape.top_k >= 1, "draft tree top-k {} must be >= 1", shape.top_k);
  MOESERVE_CHECK(shape.is_chain() || shape.total_tokens >= 1, "a draft tree (top-k {}) needs at least one draft token",
                 shape.top_k);
  MOESERVE_CHECK(shape.total_tokens >= 0, "draft tree size {} must be >= 0", shape.total_tokens);
}

SpeculativeConfig parse_speculative_config(const std::string& json) {
  SpeculativeConfig config;
  if (json.empty()) return config;
  const nlohmann::json root = parse_json(json, "--speculative-config");
  MOESERVE_CHECK(root.is_object(), "--speculative-config must be a JSON object, got {}", root.dump());
  std::optional<int> draft_tokens;
  for (const auto& [key, value] : root.items()) {
    if (key == "method") {
      MOESERVE_CHECK(value.is_string(), "--speculative-config: \"method\" must be a string");
      config.method = value.get<std::string>();
    } else if (key == "model") {
      MOESERVE_CHECK(value.is_string(), "--speculative-config: \"model\" must be a string (the draft head's directory)");
      config.model = value.get<std::string>();
    } else if (key == "num_speculative_tokens") {
      config.num_speculative_tokens = integer_field(value, key);
    } else if (key == "speculative_eagle_topk") {
      config.eagle_topk = integer_field(value, key);
    } else if (key == "speculative_num_draft_tokens") {
      draft_tokens = integer_field(value, key);
    } else if (key == "test_acceptance_rate") {
      MOESERVE_CHECK(value.is_number(), "--speculative-config: \"test_acceptance_rate\" must be a number");
      config.test_acceptance_rate = value.get<double>();
    } else {
      fail("--speculative-config: unknown key \"{}\" (method, model, num_speculative_tokens, speculative_eagle_topk, "
           "speculative_num_draft_tokens, test_acceptance_rate)",
           key);
    }
  }
  if (config.method == "deepseek_mtp") config.method = "mtp";
  MOESERVE_CHECK(config.method == "eagle3" || config.method == "mtp" || config.method == "eagle" ||
                     config.method == "test_random",
                 "--speculative-config: unknown method \"{}\" (eagle3, mtp, eagle or test_random)", config.method);
  MOESERVE_CHECK(config.method != "mtp" || config.model.empty(),
                 "--speculative-config: method mtp drafts with the target checkpoint's own MTP layer; leave out "
                 "\"model\" (\"{}\")",
                 config.model);
  MOESERVE_CHECK(config.method != "eagle3" || !config.model.empty(),
                 "--speculative-config: method eagle3 needs \"model\", the draft head's directory");
  MOESERVE_CHECK(config.num_speculative_tokens >= 1, "--speculative-config: num_speculative_tokens {} must be >= 1",
                 config.num_speculative_tokens);
  MOESERVE_CHECK(config.eagle_topk >= 1, "--speculative-config: speculative_eagle_topk {} must be >= 1",
                 config.eagle_topk);
  const int chain_tokens = config.num_speculative_tokens + 1;
  if (config.eagle_topk == 1) {
    MOESERVE_CHECK(!draft_tokens || *draft_tokens == chain_tokens,
                   "--speculative-config: a chain (speculative_eagle_topk 1) of {} verifies {} tokens, not "
                   "speculative_num_draft_tokens {}",
                   config.num_speculative_tokens, chain_tokens, *draft_tokens);
    config.num_draft_tokens = chain_tokens;
  } else {
    config.num_draft_tokens = draft_tokens.value_or(config.num_speculative_tokens * config.eagle_topk + 1);
    MOESERVE_CHECK(config.num_draft_tokens >= 2, "--speculative-config: speculative_num_draft_tokens {} must be >= 2",
                   config.num_draft_tokens);
  }
  if (config.test_acceptance_rate)
    MOESERVE_CHECK(*config.test_acceptance_rate >= 0 && *config.test_acceptance_rate <= 1,
                   "--speculative-config: test_acceptance_rate {} must be in [0, 1]", *config.test_acceptance_rate);
  return config;
}

}  // namespace moeserve::speculative
