// The Parquet reader on files written by real writers with the MLPerf datasets' column names and types:
// fixtures/parquet/*.parquet come from tools/node/write_parquet_fixtures.mjs (arrow-rs through parquet-wasm, the
// Arrow-to-Parquet path pyarrow also takes, and parquetjs-lite), which documents their content: row i holds the
// prompt [1000 i + j for j in 0 .. i % 7 + 1], dataset by i % 3 and ground_truth "answer-<i>".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "bench/dataset.h"
#include "bench/parquet/encoding.h"
#include "bench/parquet/reader.h"
#include "bench/pubmed.h"
#include "bench_test_util.h"
#include "test_util.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::bench {
namespace {

using testing::error_of;

const std::string kFixtures = MOESERVE_SOURCE_DIR "/tests/bench/fixtures/parquet/";
constexpr int kRows = 12;

std::vector<int64_t> expected_prompt(int i) {
  std::vector<int64_t> p;
  for (int j = 0; j < i % 7 + 2; ++j) p.push_back(1000 * i + j);
  return p;
}
const char* expected_dataset(int i) {
  static const char* names[] = {"aime25", "gpqa_diamond", "livecodebench_v6"};
  return names[i % 3];
}

void expect_fixture_content(const std::string& name, const std::string& prompt_column) {
  SCOPED_TRACE(name);
  parquet::File file(kFixtures + name);
  EXPECT_EQ(file.num_rows(), kRows);
  const auto prompts = file.read_int_lists(prompt_column);
  const auto datasets = file.read_strings("dataset");
  const auto truths = file.read_strings("ground_truth");
  ASSERT_EQ(prompts.size(), static_cast<size_t>(kRows));
  for (int i = 0; i < kRows; ++i) {
    EXPECT_EQ(prompts[i], expected_prompt(i)) << "row " << i;
    EXPECT_EQ(datasets[i], expected_dataset(i));
    EXPECT_EQ(truths[i], "answer-" + std::to_string(i));
  }
}

TEST(ParquetReader, ArrowV1SnappyDictionaryLikePyarrowDefaults) {
  expect_fixture_content("arrow_v1_snappy_dictionary.parquet", "input_tokens");
}
TEST(ParquetReader, ArrowV2ZstdPlainInt64SeveralRowGroups) {
  expect_fixture_content("arrow_v2_zstd_plain.parquet", "input_tokens");
}
TEST(ParquetReader, ArrowUncompressedWithTheOldColumnName) {
  expect_fixture_content("arrow_v1_uncompressed_tok_input.parquet", "tok_input");
}
TEST(ParquetReader, ArrowGzip) { expect_fixture_content("arrow_v1_gzip.parquet", "input_tokens"); }
TEST(ParquetReader, ParquetjsRepeatedFieldSnappyV1) {
  expect_fixture_content("parquetjs_snappy_v1.parquet", "input_tokens");
}
TEST(ParquetReader, ParquetjsRepeatedFieldUncompressedV2) {
  expect_fixture_content("parquetjs_uncompressed_v2.parquet", "input_tokens");
}

TEST(ParquetReader, ColumnsAndLevels) {
  parquet::File file(kFixtures + "arrow_v1_snappy_dictionary.parquet");
  const parquet::LeafColumn* prompt = nullptr;
  for (const auto& c : file.leaves())
    if (c.top_level_name == "input_tokens") prompt = &c;
  ASSERT_NE(prompt, nullptr);
  EXPECT_EQ(prompt->type, parquet::Type::int32);
  EXPECT_EQ(prompt->max_repetition_level, 1);
  EXPECT_EQ(prompt->max_definition_level, 3);  // optional list, repeated group, optional element
  EXPECT_TRUE(file.has_column("num_tokens"));
  EXPECT_FALSE(file.has_column("text_input"));
}

TEST(ParquetReader, StringListsInSpeedBenchsShape) {
  parquet::File file(kFixtures + "speed_bench_shape.parquet");
  const auto turns = file.read_string_lists("turns");
  const auto ids = file.read_strings("question_id");
  ASSERT_EQ(turns.size(), 12u);
  for (size_t i = 0; i < turns.size(); ++i) {
    EXPECT_EQ(ids[i], fmt::format("q{}", i));
    ASSERT_EQ(turns[i].size(), i % 3 + 1) << i;
    for (size_t j = 0; j < turns[i].size(); ++j)
      EXPECT_EQ(turns[i][j], j == 1 ? fmt::format("tour 1 de q{} — été", i) : fmt::format("turn {} of q{}", j, i));
  }
  EXPECT_NE(error_of([&] { file.read_string_lists("category"); }).find("column 'category' is not a list"),
            std::string::npos);
  EXPECT_NE(error_of([&] { file.read_strings("turns"); }).find("not a string column"), std::string::npos);
}

TEST(ParquetReader, ClearErrorsForWrongColumnsAndBrokenFiles) {
  parquet::File file(kFixtures + "arrow_v1_snappy_dictionary.parquet");
  EXPECT_NE(error_of([&] { file.read_int_lists("tokens"); }).find("no column 'tokens' (columns: input_tokens"),
            std::string::npos);
  EXPECT_NE(error_of([&] { file.read_int_lists("dataset"); }).find("holds BYTE_ARRAY, not integers"),
            std::string::npos);
  EXPECT_NE(error_of([&] { file.read_strings("num_tokens"); }).find("not a string column"), std::string::npos);
  const std::string dir = moeserve::testing::temp_dir("parquet");
  const std::string bad = dir + "/bad.parquet";
  write_text_file(bad, "PAR1 this is not parquet at all");
  EXPECT_NE(error_of([&] { parquet::File f(bad); }).find("not a Parquet file"), std::string::npos);
  // A truncated footer: the last bytes say PAR1 but the length points before the file's start.
  std::string bytes = read_text_file(kFixtures + "arrow_v1_gzip.parquet");
  bytes.erase(8, bytes.size() - 100);
  write_text_file(bad, bytes);
  EXPECT_NE(error_of([&] { parquet::File f(bad); }).find(bad), std::string::npos);
}

TEST(ParquetEncoding, RleBitPackedHybrid) {
  // RLE run: header 5 << 1 = 10 (five values), value 3 in one byte; then a bit-packed run of one group of 8
  // values at width 2: header (1 << 1) | 1 = 3, values 0,1,2,3,0,1,2,3 -> bytes 0b11100100 twice.
  const std::vector<uint8_t> data = {10, 3, 3, 0xE4, 0xE4};
  EXPECT_EQ(parquet::decode_rle_hybrid(data, 2, 13, "t"),
            (std::vector<uint32_t>{3, 3, 3, 3, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_THROW(parquet::decode_rle_hybrid(data, 2, 20, "t"), Error);  // runs out of data
  EXPECT_EQ(parquet::bit_width_of(0), 0);
  EXPECT_EQ(parquet::bit_width_of(1), 1);
  EXPECT_EQ(parquet::bit_width_of(3), 2);
  EXPECT_EQ(parquet::bit_width_of(4), 3);
}

TEST(Datasets, ParquetJsonlAndSyntheticLoaders) {
  Dataset parquet = load_parquet_dataset(kFixtures + "arrow_v1_snappy_dictionary.parquet");
  ASSERT_EQ(parquet.samples.size(), static_cast<size_t>(kRows));
  EXPECT_EQ(parquet.samples[5].prompt, (std::vector<int32_t>{5000, 5001, 5002, 5003, 5004, 5005, 5006}));
  EXPECT_EQ(parquet.samples[4].source, "gpqa_diamond");
  EXPECT_EQ(parquet.sha256, sha256_file(kFixtures + "arrow_v1_snappy_dictionary.parquet"));
  EXPECT_EQ(parquet.describe()["sources"]["aime25"], 4);

  const std::string dir = moeserve::testing::temp_dir("jsonl");
  write_text_file(dir + "/ok.jsonl", "{\"input_tokens\": [1, 2, 3], \"output_tokens\": 7}\n\n{\"tok_input\": [4]}\n");
  Dataset jsonl = load_jsonl_dataset(dir + "/ok.jsonl");
  ASSERT_EQ(jsonl.samples.size(), 2u);
  EXPECT_EQ(jsonl.samples[0].output_tokens, 7);
  EXPECT_EQ(jsonl.samples[1].prompt, std::vector<int32_t>{4});
  write_text_file(dir + "/text.jsonl", "{\"input_tokens\": [1]}\n{\"text\": \"hello\"}\n");
  EXPECT_NE(error_of([&] { load_jsonl_dataset(dir + "/text.jsonl"); }).find("text.jsonl:2: no prompt token ids"),
            std::string::npos);

  SyntheticSpec spec;
  spec.samples = 500;
  spec.input_length = "normal:5000:1000";
  spec.output_length = "uniform:100:300";
  spec.vocab_size = 1000;
  spec.seed = 9;
  Dataset synthetic = make_synthetic_dataset(spec);
  double input_sum = 0;
  for (const DatasetSample& s : synthetic.samples) {
    input_sum += static_cast<double>(s.prompt.size());
    EXPECT_GE(s.output_tokens, 100);
    EXPECT_LE(s.output_tokens, 300);
    for (int32_t t : s.prompt) ASSERT_LT(t, 1000);
  }
  EXPECT_NEAR(input_sum / 500, 5000, 5 * 1000 / std::sqrt(500.0));
  EXPECT_EQ(make_synthetic_dataset(spec).sha256, synthetic.sha256);  // same seed, same content
  spec.seed = 10;
  EXPECT_NE(make_synthetic_dataset(spec).sha256, synthetic.sha256);
  EXPECT_NE(error_of([&] {
              spec.input_length = "poisson:3";
              make_synthetic_dataset(spec);
            }).find("expected N, uniform:LO:HI or normal:MEAN:STD"),
            std::string::npos);
}

TEST(Datasets, PubMedRenderedInHarmonyForCompletion) {
  const auto tokenizer = Tokenizer::o200k_harmony();
  const Dataset d =
      load_pubmed_dataset(MOESERVE_SOURCE_DIR "/tests/fixtures/pubmed/pubmed_test_excerpt.txt", *tokenizer);
  ASSERT_EQ(d.samples.size(), 3u);
  const auto start = tokenizer->special_id("<|start|>");
  for (const DatasetSample& s : d.samples) {
    ASSERT_GT(s.prompt.size(), 150u);  // the system and developer messages and the article (one is a single sentence)
    EXPECT_EQ(s.prompt.front(), start);
    // "<|start|>assistant": what the model completes.
    EXPECT_EQ(tokenizer->decode(std::span(s.prompt).last(2)), "<|start|>assistant");
    EXPECT_EQ(s.source, "pubmed_summarization");
    EXPECT_EQ(s.ground_truth.find("<S>"), std::string::npos);
  }
  const std::string text = tokenizer->decode(d.samples[0].prompt);
  EXPECT_NE(text.find("Reasoning: low"), std::string::npos);
  EXPECT_NE(text.find("Current date: 2025-09-30"), std::string::npos);
  EXPECT_NE(text.find("<|start|>developer<|message|># Instructions\n\nYou are an expert at reading and summarizing"),
            std::string::npos);
  EXPECT_NE(text.find("<|start|>user<|message|>septic internal jugular vein - sigmoid sinus thrombosis is a rare"),
            std::string::npos);
}

}  // namespace
}  // namespace moeserve::bench
