// Checkpoint loading: layouts, sharding, expert formats, and every kind of bad input named in a clear error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "error_checks.h"
#include "model/gpt_oss/checkpoint.h"
#include "model/mxfp4.h"
#include "runner/cpu/cpu_runner.h"
#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve {
namespace {

namespace fs = std::filesystem;

std::string copy_model(const std::string& from) {
  std::string dir = testing::temp_dir("copy");
  fs::copy(from, dir, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  return dir;
}

// Expects Checkpoint::open to fail with a message containing every one of `parts`.
void expect_open_fails(const std::string& dir, std::initializer_list<std::string> parts) {
  try {
    Checkpoint::open(dir);
    ADD_FAILURE() << "opened " << dir << " without error";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

std::vector<float> all_logits(const std::string& dir, const std::vector<int32_t>& prompt) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(dir));
  CpuRunner runner(checkpoint, 2);
  runner.allocate_kv_cache({16, 64});
  const int groups = kv_groups_of(checkpoint->config()).num_groups();
  std::vector<std::vector<int32_t>> tables(groups);
  for (int g = 0; g < groups; ++g)
    for (int b = 0; b < 8; ++b) tables[g].push_back(g * 8 + b);
  SequenceStep step;
  step.tokens = prompt;
  for (const auto& t : tables) step.block_tables.emplace_back(t);
  step.num_logits = static_cast<int32_t>(prompt.size());
  ForwardBatch batch;
  batch.sequences.push_back(step);
  ForwardOutput out;
  runner.forward(batch, out);
  return out.logits;
}

TinyModelOptions small() {
  TinyModelOptions o;
  o.vocab = 512;
  return o;
}

const std::vector<int32_t> kPrompt = {5, 17, 300, 42, 8, 99, 411, 250, 3, 77, 123, 64, 200, 301, 4, 9, 10, 11,
                                      12, 13, 14, 15, 16, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31};

TEST(Checkpoint, ReadsHuggingFaceConfig) {
  auto checkpoint = Checkpoint::open(testing::tiny_model());
  const ModelConfig& c = checkpoint->config();
  EXPECT_EQ(c.layout, CheckpointLayout::huggingface);
  EXPECT_EQ(c.vocab_size, 201088);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.layer_types[0], AttentionKind::sliding);
  EXPECT_EQ(c.layer_types[1], AttentionKind::full);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_NEAR(c.rope_concentration(), 1.3465735902799727, 1e-12);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{200002, 199999, 200012}));
  EXPECT_EQ(checkpoint->expert_format(), ExpertFormat::mxfp4);
}

TEST(Checkpoint, YarnFrequenciesMatchTheReferenceValues) {
  // Sample values from openai/gpt-oss gpt_oss/torch/model.py (RotaryEmbedding) for the real head_dim 64.
  ModelConfig c = tiny_model_config({});
  auto inv_freq = rope_inverse_frequencies(c);
  ASSERT_EQ(inv_freq.size(), 32u);
  EXPECT_FLOAT_EQ(inv_freq[0], 1.0f);
  EXPECT_NEAR(inv_freq[8], 0.0508133, 1e-6);
  EXPECT_NEAR(inv_freq[9], 0.0317057, 1e-6);
  EXPECT_NEAR(inv_freq[17] / 1.29319e-4, 1.0, 1e-4);
  EXPECT_NEAR(inv_freq[18] / 3.83088e-5, 1.0, 1e-4);
  EXPECT_NEAR(inv_freq[31] / 3.02351e-7, 1.0, 1e-4);
}

TEST(Checkpoint, RopeParametersKeyIsAcceptedLikeRopeScaling) {
  std::string dir = copy_model(testing::tiny_model(small()));
  auto config = read_json_file(dir + "/config.json");
  config["rope_parameters"] = config["rope_scaling"];
  config["rope_parameters"]["rope_theta"] = config["rope_theta"];
  config.erase("rope_scaling");
  config.erase("rope_theta");
  write_text_file(dir + "/config.json", config.dump());
  EXPECT_EQ(all_logits(dir, kPrompt), all_logits(testing::tiny_model(small()), kPrompt));
}

TEST(Checkpoint, OriginalAndHuggingFaceLayoutsGiveBitIdenticalLogits) {
  TinyModelOptions original = small();
  original.layout = CheckpointLayout::original;
  auto checkpoint = Checkpoint::open(testing::tiny_model(original));
  EXPECT_EQ(checkpoint->config().layout, CheckpointLayout::original);
  EXPECT_TRUE(file_exists(testing::tiny_model(original) + "/dtypes.json"));
  EXPECT_EQ(all_logits(testing::tiny_model(original), kPrompt), all_logits(testing::tiny_model(small()), kPrompt));
}

TEST(Checkpoint, ShardedCheckpointsLoadThroughTheIndex) {
  TinyModelOptions sharded = small();
  sharded.shards = 3;
  std::string dir = testing::tiny_model(sharded);
  EXPECT_TRUE(file_exists(dir + "/model.safetensors.index.json"));
  EXPECT_TRUE(file_exists(dir + "/model-00002-of-00003.safetensors"));
  EXPECT_EQ(Checkpoint::open(dir)->tensors().files().size(), 3u);
  EXPECT_EQ(all_logits(dir, kPrompt), all_logits(testing::tiny_model(small()), kPrompt));

  TinyModelOptions original = sharded;
  original.layout = CheckpointLayout::original;
  EXPECT_TRUE(file_exists(testing::tiny_model(original) + "/model--00001-of-00003.safetensors"));
  EXPECT_EQ(all_logits(testing::tiny_model(original), kPrompt), all_logits(dir, kPrompt));
}

TEST(Checkpoint, DenseExpertLayoutHoldsTheSameModelAsMxfp4) {
  TinyModelOptions dense = small();
  dense.expert_format = ExpertFormat::dense;
  auto a = Checkpoint::open(testing::tiny_model(dense));
  auto b = Checkpoint::open(testing::tiny_model(small()));
  EXPECT_EQ(a->expert_format(), ExpertFormat::dense);
  const auto& da = a->weights().layers[1].mlp1;
  const auto& db = b->weights().layers[1].mlp1;
  for (int64_t e = 0; e < da.num_experts; ++e)
    for (int64_t r = 0; r < da.out_features; r += 7)
      for (int64_t k = 0; k < da.in_features; k += 3) ASSERT_EQ(da.weight(e, r, k), db.weight(e, r, k));
  auto la = all_logits(testing::tiny_model(dense), kPrompt);
  auto lb = all_logits(testing::tiny_model(small()), kPrompt);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    diff += (la[i] - lb[i]) * (la[i] - lb[i]);
    norm += lb[i] * lb[i];
  }
  EXPECT_LE(std::sqrt(diff / norm), 1e-5);  // same values, different summation order
}

TEST(Checkpoint, Mxfp4ElementsFollowTheLowNibbleFirstLayout) {
  auto checkpoint = Checkpoint::open(testing::tiny_model(small()));
  const ExpertMatrix& m = checkpoint->weights().layers[0].mlp2;
  // Element (e=1, r=2, k=33): block k/32 = 1, byte (33 % 32) / 2 = 0, high nibble (odd k).
  const int64_t blocks_per_row = m.in_features / 32;
  const int64_t block = (1 * m.out_features + 2) * blocks_per_row + 1;
  const uint8_t byte = m.blocks[block * 16 + 0];
  EXPECT_EQ(m.weight(1, 2, 33), kFp4Values[byte >> 4] * std::ldexp(1.0f, m.scales[block] - 127));
  EXPECT_EQ(m.weight(1, 2, 32), kFp4Values[byte & 0xF] * std::ldexp(1.0f, m.scales[block] - 127));
}

TEST(Checkpoint, MakeTinyIsDeterministicAndSeedDependent) {
  TinyModelOptions a = small();
  std::string first = testing::temp_dir("det"), second = testing::temp_dir("det");
  make_tiny_checkpoint(a, first);
  make_tiny_checkpoint(a, second);
  EXPECT_EQ(sha256_file(first + "/model.safetensors"), sha256_file(second + "/model.safetensors"));
  a.seed = 1;
  std::string third = testing::temp_dir("det");
  make_tiny_checkpoint(a, third);
  EXPECT_NE(sha256_file(first + "/model.safetensors"), sha256_file(third + "/model.safetensors"));
}

// ---- bad input ----

TEST(CheckpointErrors, MissingDirectoryAndFiles) {
  expect_open_fails("/nonexistent/model", {"/nonexistent/model", "does not exist"});
  std::string dir = copy_model(testing::tiny_model(small()));
  fs::remove(dir + "/config.json");
  expect_open_fails(dir, {"config.json"});
  dir = copy_model(testing::tiny_model(small()));
  fs::remove(dir + "/model.safetensors");
  expect_open_fails(dir, {"no .safetensors files", dir});
}

TEST(CheckpointErrors, MissingShardNamedByTheIndex) {
  TinyModelOptions sharded = small();
  sharded.shards = 2;
  std::string dir = copy_model(testing::tiny_model(sharded));
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  expect_open_fails(dir, {"missing checkpoint file", "model-00002-of-00002.safetensors"});
  // A shard name longer than the filesystem allows (found by safetensors_fuzz) is a missing file too, not a throw
  // from the filesystem library.
  auto index = read_json_file(dir + "/model.safetensors.index.json");
  const std::string long_name = std::string(300, 'x') + ".safetensors";
  for (auto& [tensor, file] : index["weight_map"].items()) file = long_name;
  write_text_file(dir + "/model.safetensors.index.json", index.dump());
  expect_open_fails(dir, {"missing checkpoint file", long_name});
}

TEST(CheckpointErrors, TruncatedAndCorruptHeaders) {
  const std::string source = testing::tiny_model(small()) + "/model.safetensors";
  std::string bytes = read_text_file(source);
  auto write_variant = [&](const std::string& contents) {
    std::string dir = copy_model(testing::tiny_model(small()));
    write_text_file(dir + "/model.safetensors", contents);
    return dir;
  };
  expect_open_fails(write_variant(bytes.substr(0, 5)), {"model.safetensors", "no header length"});
  expect_open_fails(write_variant(bytes.substr(0, 200)), {"model.safetensors", "truncated"});
  expect_open_fails(write_variant(bytes.substr(0, bytes.size() - 100)), {"model.safetensors", "outside"});
  std::string huge = bytes;
  huge[7] = 0x7f;  // header length far beyond any limit
  expect_open_fails(write_variant(huge), {"model.safetensors", "header length"});
  std::string garbled = bytes;
  garbled[8 + 3] = '\x01';
  expect_open_fails(write_variant(garbled), {"model.safetensors", "JSON"});
  std::string trailing = bytes + "extra";
  expect_open_fails(write_variant(trailing), {"model.safetensors", "trailing bytes"});
}

// Rewrites the header of a single-file checkpoint through `edit` and keeps the data.
std::string with_header(const std::function<void(nlohmann::json&)>& edit) {
  std::string dir = copy_model(testing::tiny_model(small()));
  std::string bytes = read_text_file(dir + "/model.safetensors");
  uint64_t len = 0;
  std::memcpy(&len, bytes.data(), 8);
  auto header = nlohmann::json::parse(bytes.substr(8, len));
  edit(header);
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  uint64_t new_len = text.size();
  std::string out(reinterpret_cast<const char*>(&new_len), 8);
  out += text + bytes.substr(8 + len);
  write_text_file(dir + "/model.safetensors", out);
  return dir;
}

TEST(CheckpointErrors, WrongShapeOrDtypeNamesTheTensor) {
  const std::string tensor = "model.layers.1.self_attn.k_proj.weight";
  expect_open_fails(with_header([&](auto& h) {
                      auto shape = h[tensor]["shape"];
                      h[tensor]["shape"] = {shape[1], shape[0]};
                    }),
                    {tensor, "expected shape"});
  expect_open_fails(with_header([&](auto& h) { h[tensor]["dtype"] = "F16"; }), {tensor, "F16", "not allowed"});
  const std::string blocks = "model.layers.0.mlp.experts.down_proj_blocks";
  expect_open_fails(with_header([&](auto& h) {
                      h[blocks]["dtype"] = "BF16";
                      auto shape = h[blocks]["shape"];
                      shape[3] = 8;
                      h[blocks]["shape"] = shape;
                    }),
                    {blocks, "BF16"});
  expect_open_fails(with_header([&](auto& h) { h[tensor]["dtype"] = "Q9"; }), {tensor, "unsupported dtype"});
}

TEST(CheckpointErrors, MissingTensorIsNamed) {
  std::string dir = with_header([](auto& h) {
    // Drop a tensor but keep the data buffer tiled: fold its bytes into the previous tensor is not possible, so
    // rename it instead, which makes the expected one missing and an unexpected one present.
    h["model.layers.2.self_attn.sinks_renamed"] = h["model.layers.2.self_attn.sinks"];
    h.erase("model.layers.2.self_attn.sinks");
  });
  expect_open_fails(dir, {"model.layers.2.self_attn.sinks", "missing"});
}

TEST(CheckpointErrors, ConfigThatContradictsTheTensors) {
  std::string dir = copy_model(testing::tiny_model(small()));
  auto config = read_json_file(dir + "/config.json");
  config["num_hidden_layers"] = 3;
  config["layer_types"].erase(3);
  write_text_file(dir + "/config.json", config.dump());
  expect_open_fails(dir, {"model.layers.3.", "not part of a GPT-OSS model with this config.json"});

  dir = copy_model(testing::tiny_model(small()));
  config = read_json_file(dir + "/config.json");
  config["hidden_size"] = 96;
  write_text_file(dir + "/config.json", config.dump());
  expect_open_fails(dir, {"model.safetensors", "expected shape"});
}

TEST(CheckpointErrors, UnknownModelTypeAndBadConfigValues) {
  std::string dir = copy_model(testing::tiny_model(small()));
  auto config = read_json_file(dir + "/config.json");
  config["model_type"] = "llama";
  write_text_file(dir + "/config.json", config.dump());
  expect_open_fails(dir, {"config.json", "unknown model_type \"llama\""});

  config["model_type"] = "gpt_oss";
  config["num_key_value_heads"] = 3;
  write_text_file(dir + "/config.json", config.dump());
  expect_open_fails(dir, {"config.json", "num_key_value_heads"});

  config["num_key_value_heads"] = "two";
  write_text_file(dir + "/config.json", config.dump());
  expect_open_fails(dir, {"config.json", "num_key_value_heads", "wrong type"});

  write_text_file(dir + "/config.json", "{not json");
  expect_open_fails(dir, {"config.json", "not valid JSON"});
}

TEST(CheckpointErrors, CliExitsNonZeroWithTheMessage) {
  auto result = testing::run_command(std::string(MOESERVE_BINARY) + " generate --model /nonexistent --tokens 1,2");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("moeserve: error: model directory /nonexistent does not exist"), std::string::npos)
      << result.output;
  result = testing::run_command(std::string(MOESERVE_BINARY) + " generate --model " + testing::tiny_model(small()) +
                                " --tokens 1,x,3");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("\"x\" is not a token id"), std::string::npos) << result.output;
  result = testing::run_command(std::string(MOESERVE_BINARY) + " generate --model " + testing::tiny_model(small()) +
                                " --tokens 1,600,3");
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_NE(result.output.find("token id 600 is outside the vocabulary of 512"), std::string::npos) << result.output;
}

// Issue 14: every config.json / generation_config.json / safetensors error names the file and the field or tensor,
// and sizes are refused by their bound before anything is allocated for them.

// A copy of the small model with config.json (or `file`) edited as text.
std::string with_text(const std::function<std::string(std::string)>& edit, const std::string& file = "config.json") {
  std::string dir = copy_model(testing::tiny_model(small()));
  write_text_file(dir + "/" + file, edit(read_text_file(dir + "/" + file)));
  return dir;
}
std::string with_config(const std::function<void(nlohmann::json&)>& edit, const std::string& file = "config.json") {
  return with_text(
      [&](std::string text) {
        auto j = nlohmann::json::parse(text);
        edit(j);
        return j.dump();
      },
      file);
}
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

TEST(ConfigLimits, LayerCountIsRefusedBeforeLayerTypesAreSized) {
  const std::string dir = with_config([](auto& c) {
    c["num_hidden_layers"] = 1000000000;
    c.erase("layer_types");  // the default alternating list would hold 10^9 entries
  });
  const std::string error = testing::error_under_memory_limit([&] { Checkpoint::open(dir); });
  EXPECT_NE(error.find("config.json: num_hidden_layers = 1000000000 is out of range (1..1024)"), std::string::npos)
      << error;
}

TEST(ConfigLimits, SizesBeyondTheirBoundsNameTheField) {
  expect_open_fails(with_config([](auto& c) { c["vocab_size"] = 1000000000; }),
                    {"config.json: vocab_size = 1000000000 is out of range (1..16777216)"});
  expect_open_fails(with_config([](auto& c) { c["hidden_size"] = -64; }),
                    {"config.json: hidden_size = -64 is out of range (1..65536)"});
  expect_open_fails(with_config([](auto& c) { c["num_local_experts"] = 100000; }),
                    {"config.json: num_local_experts = 100000 is out of range (1..4096)"});
  expect_open_fails(with_config([](auto& c) { c["max_position_embeddings"] = int64_t{1} << 40; }),
                    {"config.json: max_position_embeddings = 1099511627776 is out of range"});
  expect_open_fails(with_config([](auto& c) { c["rope_scaling"]["factor"] = 1e300; }),
                    {"config.json", "rope factor = 1e+300 is out of range"});
  expect_open_fails(with_config([](auto& c) { c["rope_scaling"] = 5; }), {"config.json rope_scaling: not a JSON object"});
}

TEST(ConfigLimits, IntegersAreCheckedNotConverted) {
  // 2^32 + 64 would wrap to 64 through a plain int conversion, 64.5 truncate to 64.
  expect_open_fails(with_config([](auto& c) { c["hidden_size"] = 4294967360ull; }),
                    {"config.json: hidden_size = 4294967360 is out of range (-2147483648..2147483647)"});
  expect_open_fails(with_config([](auto& c) { c["head_dim"] = 64.5; }), {"config.json: head_dim = 64.5 is not an integer"});
  expect_open_fails(with_text([](std::string t) { return replaced(t, "\"vocab_size\": 512", "\"vocab_size\": 1e20"); }),
                    {"config.json: vocab_size = 1e+20 is out of range"});
  expect_open_fails(with_config([](auto& c) { c["eos_token_id"] = 1.5; }),
                    {"config.json: eos_token_id = 1.5 is not an integer"});
}

TEST(ConfigLimits, NumberOverflowNamesTheFieldAndLine) {
  expect_open_fails(with_text([](std::string t) { return replaced(t, "\"rope_theta\": 150000.0", "\"rope_theta\": 1e400"); }),
                    {"config.json is not valid JSON: rope_theta: number overflow parsing '1e400' (line"});
  expect_open_fails(with_text([](std::string t) { return replaced(t, "\"factor\": 32.0", "\"factor\": -1e400"); }),
                    {"config.json is not valid JSON: rope_scaling.factor: number overflow parsing '-1e400'"});
}

TEST(ConfigLimits, DeepNestingIsAnErrorNotAStackOverflow) {
  const int depth = 1000000;
  const std::string dir = with_text([&](std::string t) {
    return replaced(t, "\"use_cache\": true", "\"use_cache\": " + std::string(depth, '[') + std::string(depth, ']'));
  });
  expect_open_fails(dir, {"config.json: use_cache[0][0]", "JSON nested deeper than 64 levels"});
}

TEST(ConfigLimits, GenerationConfigEosOfTheWrongTypeNamesTheFile) {
  expect_open_fails(with_config([](auto& g) { g["eos_token_id"] = {"x"}; }, "generation_config.json"),
                    {"generation_config.json: \"eos_token_id[0]\" has the wrong type (\"x\"); expected an integer"});
  expect_open_fails(with_config([](auto& g) { g["eos_token_id"] = "x"; }, "generation_config.json"),
                    {"generation_config.json: \"eos_token_id\" has the wrong type"});
  expect_open_fails(with_config([](auto& g) { g["eos_token_id"] = -1; }, "generation_config.json"),
                    {"generation_config.json: eos_token_id -1 is negative"});
  expect_open_fails(with_text([](std::string) { return "[1, 2]"; }, "generation_config.json"),
                    {"generation_config.json: not a JSON object"});
  // Null leaves config.json's ids in place, as before.
  const std::string dir = with_config([](auto& g) { g["eos_token_id"] = nullptr; }, "generation_config.json");
  EXPECT_NO_THROW(Checkpoint::open(dir));
}

TEST(ConfigLimits, ConfigFilesAreReadWithinTheirLimit) {
  // /dev/zero never ends: the read stops at the limit instead of filling memory.
  EXPECT_THAT([] { read_json_file("/dev/zero"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("/dev/zero: larger than 16 MiB")));
  const std::string dir = copy_model(testing::tiny_model(small()));
  write_text_file(dir + "/config.json", std::string(kMaxConfigJsonBytes + 1, ' '));
  expect_open_fails(dir, {"config.json: larger than 16 MiB (16777217 bytes)"});
}

TEST(SafetensorsLimits, HeaderLengthsAndShapesAreCheckedAgainstTheFile) {
  const std::string source = testing::tiny_model(small()) + "/model.safetensors";
  std::string bytes = read_text_file(source);
  std::string huge = bytes;
  std::memset(huge.data(), 0xff, 8);  // 2^64 - 1: must not wrap when the 8 length bytes are added
  std::string dir = copy_model(testing::tiny_model(small()));
  write_text_file(dir + "/model.safetensors", huge);
  expect_open_fails(dir, {"model.safetensors: header length 18446744073709551615 exceeds"});
  const std::string tensor = "model.norm.weight";
  // 2^62 * 4 elements of 8 bytes overflow 64 bits back to a small product: refused as the shape is multiplied.
  expect_open_fails(with_header([&](auto& h) {
                      h[tensor]["dtype"] = "I64";
                      h[tensor]["shape"] = {uint64_t{1} << 62, 4};
                    }),
                    {tensor, "bytes are too few for shape [4611686018427387904, 4] of I64"});
  expect_open_fails(with_header([&](auto& h) { h[tensor]["shape"] = {1, 1, 1, 1, 1, 1, 1, 1, 1}; }),
                    {tensor, "shape has 9 dimensions (at most 8)"});
  expect_open_fails(with_header([&](auto& h) { h[tensor]["shape"] = {-5}; }), {tensor, "negative"});
}

TEST(SafetensorsLimits, HeaderJsonErrorsNameTheFileAndEntry) {
  const std::string tensor = "model.norm.weight";
  expect_open_fails(with_header([&](auto& h) { h[tensor]["junk"] = nlohmann::json::parse("[[[[[[[[[[1]]]]]]]]]]"); }),
                    {"model.safetensors header: ", tensor, "nested deeper than 8 levels"});
  std::string dir = with_header([&](auto& h) { h[tensor]["junk"] = 123456789; });
  std::string bytes = read_text_file(dir + "/model.safetensors");
  write_text_file(dir + "/model.safetensors", replaced(bytes, "123456789", "1.0e999  "));
  expect_open_fails(dir, {"model.safetensors header is not valid JSON", tensor + ".junk: number overflow"});
}

TEST(SafetensorsLimits, IndexAndDtypesErrorsNameTheFile) {
  TinyModelOptions sharded = small();
  sharded.shards = 2;
  std::string dir = copy_model(testing::tiny_model(sharded));
  write_text_file(dir + "/model.safetensors.index.json", "{\"weight_map\": [1, 2]}");
  expect_open_fails(dir, {"model.safetensors.index.json: no weight_map object"});
  write_text_file(dir + "/model.safetensors.index.json", std::string(100, '[') + std::string(100, ']'));
  expect_open_fails(dir, {"model.safetensors.index.json", "nested deeper than 64 levels"});
  TinyModelOptions original = small();
  original.layout = CheckpointLayout::original;
  dir = copy_model(testing::tiny_model(original));
  auto dtypes = read_json_file(dir + "/dtypes.json");
  dtypes["norm.scale"] = 16;
  write_text_file(dir + "/dtypes.json", dtypes.dump());
  expect_open_fails(dir, {"dtypes.json: \"norm.scale\" has the wrong type (16); expected a string"});
}

}  // namespace
}  // namespace moeserve

namespace moeserve {
namespace {

TEST(Mxfp4, E8m0ScalesAreExactPowersOfTwoForEveryByte) {
  for (int s = 0; s < 256; ++s) {
    const float expected = std::ldexp(1.0f, s - 127);  // torch.ldexp, as transformers dequantises
    EXPECT_EQ(e8m0_to_float(static_cast<uint8_t>(s)), expected) << "scale byte " << s;
  }
}

}  // namespace
}  // namespace moeserve
