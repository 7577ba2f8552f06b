// EAGLE-3 draft head loading: both exporter namings, the optional tensors, and every kind of bad tensor named.
#include <gtest/gtest.h>

#include <functional>

#include "model/eagle3_fixture.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::speculative {
namespace {

using testing::draft_options;
using testing::drop;
using testing::edited_copy;
using testing::tiny_draft_dir;
using testing::tiny_target;

void expect_open_fails(const std::string& dir, std::initializer_list<std::string> parts) {
  try {
    Eagle3Checkpoint::open(dir, tiny_target()->config());
    ADD_FAILURE() << "opened " << dir << " without error";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Gives the tensor another shape (zeros of its dtype).
void reshape(std::vector<TensorToWrite>& tensors, const std::string& name, std::vector<int64_t> shape) {
  for (auto& t : tensors) {
    if (t.name != name) continue;
    int64_t bytes = static_cast<int64_t>(dtype_size(t.dtype));
    for (int64_t d : shape) bytes *= d;
    t.shape = shape;
    t.fill = [bytes] { return std::vector<uint8_t>(bytes, 0); };
  }
}

TEST(Eagle3Checkpoint, OpensBothNamings) {
  for (std::string names : {"midlayer", "layers"}) {
    auto draft = Eagle3Checkpoint::open(tiny_draft_dir(draft_options(names)), tiny_target()->config());
    const Eagle3Config& c = draft->config();
    EXPECT_EQ(draft->layer_prefix(), names == "midlayer" ? "midlayer." : "layers.0.");
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.draft_vocab_size, 128);
    EXPECT_EQ(c.aux_layer_ids, (std::vector<int>{0, 2, 3}));
    const Eagle3Weights& w = draft->weights();
    EXPECT_EQ(w.fc.rows, 64);
    EXPECT_EQ(w.fc.cols, 3 * 64);
    EXPECT_EQ(w.q.cols, 128);
    EXPECT_TRUE(w.lm_head.has_value());
    EXPECT_FALSE(w.embed_tokens.has_value());
    EXPECT_TRUE(w.input_norm.empty());
    ASSERT_EQ(w.d2t.size(), 128u);
    // Ascending target ids spread over the vocabulary: draft id 1 is target id 4 (512 / 128).
    EXPECT_EQ(1 + w.d2t[1], 4);
    EXPECT_EQ(127 + w.d2t[127], 508);
  }
  auto normed = Eagle3Checkpoint::open(tiny_draft_dir(draft_options("midlayer", true)), tiny_target()->config());
  EXPECT_TRUE(normed->config().norm_before_fc);
  EXPECT_EQ(normed->weights().input_norm.size(), 3u * 64);
}

TEST(Eagle3Checkpoint, OptionalTensorsFallBackToTheTarget) {
  // A full-vocabulary head without lm_head and d2t uses the target's unembedding; embed_tokens is read when present.
  const std::string dir = testing::full_vocab_head_dir();
  auto draft = Eagle3Checkpoint::open(dir, tiny_target()->config());
  EXPECT_FALSE(draft->weights().lm_head.has_value());
  EXPECT_TRUE(draft->weights().d2t.empty());
  ASSERT_TRUE(draft->weights().embed_tokens.has_value());
  EXPECT_EQ(draft->weights().embed_tokens->dtype, DType::F32);
  EXPECT_TRUE(draft->config().norm_before_residual);
  EXPECT_EQ(draft->weights().q.dtype, DType::F32);
}

// SpecForge's t2d: marks exactly the target ids that d2t maps to (ids 4 * i for the tiny head).
std::function<std::vector<uint8_t>()> t2d_marking(std::vector<int> ids) {
  return [ids] {
    std::vector<uint8_t> bytes(512, 0);
    for (int id : ids) bytes[id] = 1;
    return bytes;
  };
}

TEST(Eagle3Checkpoint, TheT2dMaskIsCheckedAgainstD2t) {
  const std::string base = tiny_draft_dir(draft_options());
  std::vector<int> members;
  for (int i = 0; i < 128; ++i) members.push_back(4 * i);
  auto with_t2d = [&](std::vector<int> ids) {
    return edited_copy(base, [&](auto& t) { t.push_back({"t2d", DType::BOOL, {512}, t2d_marking(ids)}); });
  };
  EXPECT_EQ(Eagle3Checkpoint::open(with_t2d(members), tiny_target()->config())->weights().d2t.size(), 128u);
  std::vector<int> shifted = members;
  shifted[7] = 29;
  expect_open_fails(with_t2d(shifted), {"t2d", "does not mark token 28", "draft id 7"});
  members.pop_back();
  expect_open_fails(with_t2d(members), {"t2d", "marks 127 tokens", "128"});
}

TEST(Eagle3Checkpoint, MissingAndIllShapedTensorsAreNamed) {
  const std::string base = tiny_draft_dir(draft_options());
  expect_open_fails(edited_copy(base, [](auto& t) { drop(t, "midlayer.mlp.up_proj.weight"); }),
                    {"midlayer.mlp.up_proj.weight"});
  expect_open_fails(edited_copy(base, [](auto& t) { drop(t, "fc.weight"); }), {"fc.weight"});
  expect_open_fails(edited_copy(base, [](auto& t) { reshape(t, "midlayer.self_attn.q_proj.weight", {128, 256}); }),
                    {"midlayer.self_attn.q_proj.weight", "[128, 256]", "expected shape [256, 128]"});
  expect_open_fails(edited_copy(base, [](auto& t) { reshape(t, "fc.weight", {64, 128}); }),
                    {"fc.weight", "expected shape [64, 192]"});
  expect_open_fails(edited_copy(base, [](auto& t) { reshape(t, "midlayer.hidden_norm.weight", {32}); }),
                    {"midlayer.hidden_norm.weight", "expected shape [64]"});
  expect_open_fails(edited_copy(base,
                                [](auto& t) {
                                  for (auto& x : t)
                                    if (x.name == "d2t") x.dtype = DType::I32;
                                  reshape(t, "d2t", {128});
                                }),
                    {"d2t", "dtype I32"});
  expect_open_fails(edited_copy(base,
                                [](auto& t) {
                                  t.push_back({"midlayer.self_attn.q_proj.bias", DType::BF16, {256},
                                               [] { return std::vector<uint8_t>(512, 0); }});
                                }),
                    {"midlayer.self_attn.q_proj.bias", "not part of an EAGLE-3 draft head"});
  expect_open_fails(edited_copy(base,
                                [](auto& t) {
                                  for (auto& x : t)
                                    if (x.name == "d2t")
                                      x.fill = [] {
                                        std::vector<uint8_t> bytes(128 * 8, 0);
                                        bytes[5 * 8] = 200;  // draft id 5 -> 205; id 127 still fine
                                        bytes[127 * 8] = 0xff;  // offset 255: 127 + 255 = 382
                                        bytes[126 * 8 + 1] = 0x04;  // offset 1024: outside 512
                                        return bytes;
                                      };
                                }),
                    {"d2t", "draft id 126", "1150", "vocabulary of 512"});
  expect_open_fails(edited_copy(base, [](auto& t) { drop(t, "d2t"); }), {"draft_vocab_size", "no d2t"});
  expect_open_fails(edited_copy(base, [](auto& t) { drop(t, "lm_head.weight"); }),
                    {"no lm_head.weight", "unembedding"});
  expect_open_fails(edited_copy(base,
                                [](auto& t) {
                                  drop(t, "midlayer.self_attn.q_proj.weight");
                                }),
                    {"neither midlayer.self_attn.q_proj.weight nor layers.0.self_attn.q_proj.weight"});
}

TEST(Eagle3Checkpoint, ConfigAndTensorsMustAgree) {
  const std::string base = tiny_draft_dir(draft_options());
  expect_open_fails(edited_copy(base, {}, [](auto& c) { c["eagle_config"]["norm_before_fc"] = true; }),
                    {"norm_before_fc", "input_norm.weight is absent"});
  expect_open_fails(edited_copy(tiny_draft_dir(draft_options("midlayer", true)), {},
                                [](auto& c) { c["eagle_config"].erase("norm_before_fc"); }),
                    {"input_norm.weight", "not part of an EAGLE-3 draft head"});
  expect_open_fails(edited_copy(base, {}, [](auto& c) { c["vocab_size"] = 1024; }),
                    {"vocab_size", "1024", "the target's 512"});
  expect_open_fails(
      edited_copy(base, {}, [](auto& c) { c["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = {0, 9}; }),
      {"layer 9", "4 layers"});
}

}  // namespace
}  // namespace moeserve::speculative
