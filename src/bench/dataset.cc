#include "bench/dataset.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "bench/parquet/reader.h"
#include "util/bounded_read.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_fields.h"
#include "util/json_parse.h"

namespace moeserve::bench {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Longer than any prompt or output the benchmarks define (and any context GPT-OSS has): a bound on what one
// sample may size.
constexpr int kMaxTokensPerSample = 1 << 20;

int32_t token_id(int64_t value, const std::string& where) {
  MOESERVE_CHECK(value >= 0 && value <= INT32_MAX, "{}: token id {} is out of range", where, value);
  return static_cast<int32_t>(value);
}

nlohmann::json length_stats(std::vector<int64_t> lengths) {
  if (lengths.empty()) return nullptr;
  std::sort(lengths.begin(), lengths.end());
  double sum = 0;
  for (int64_t n : lengths) sum += static_cast<double>(n);
  return {{"min", lengths.front()},
          {"max", lengths.back()},
          {"mean", sum / static_cast<double>(lengths.size())},
          {"median", lengths[lengths.size() / 2]}};
}

// A length distribution: "N", "uniform:LO:HI" or "normal:MEAN:STD".
class LengthDistribution {
 public:
  explicit LengthDistribution(const std::string& spec) : spec_(spec) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t colon; (colon = spec.find(':', start)) != std::string::npos; start = colon + 1)
      parts.push_back(spec.substr(start, colon - start));
    parts.push_back(spec.substr(start));
    auto number = [&](const std::string& text) {
      size_t used = 0;
      double value = 0;
      try {
        value = std::stod(text, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      MOESERVE_CHECK(used == text.size() && used > 0 && value >= 0, "length spec '{}': '{}' is not a number", spec,
                     text);
      MOESERVE_CHECK(value <= static_cast<double>(kMaxTokensPerSample), "length spec '{}': {} is out of range (0..{})",
                     spec, text, kMaxTokensPerSample);
      return value;
    };
    if (parts.size() == 1) {
      kind_ = "fixed";
      a_ = number(parts[0]);
    } else if (parts.size() == 3 && (parts[0] == "uniform" || parts[0] == "normal")) {
      kind_ = parts[0];
      a_ = number(parts[1]);
      b_ = number(parts[2]);
    } else {
      fail("length spec '{}': expected N, uniform:LO:HI or normal:MEAN:STD", spec);
    }
    MOESERVE_CHECK(kind_ != "uniform" || a_ <= b_, "length spec '{}': LO exceeds HI", spec);
    MOESERVE_CHECK(kind_ == "normal" || a_ >= 1, "length spec '{}': lengths must be at least 1", spec);
  }

  int draw(std::mt19937_64& rng) const {
    double value = a_;
    if (kind_ == "uniform") {
      value = std::uniform_int_distribution<int64_t>(static_cast<int64_t>(a_), static_cast<int64_t>(b_))(rng);
    } else if (kind_ == "normal") {
      value = std::clamp(std::round(std::normal_distribution<double>(a_, b_)(rng)), 1.0, std::max(1.0, 2 * a_));
    }
    return static_cast<int>(value);
  }

 private:
  std::string spec_;
  std::string kind_;
  double a_ = 0;
  double b_ = 0;
};

}  // namespace

nlohmann::json Dataset::describe() const {
  std::vector<int64_t> prompt_lengths;
  std::vector<int64_t> output_lengths;
  std::map<std::string, int64_t> sources;
  for (const DatasetSample& s : samples) {
    prompt_lengths.push_back(static_cast<int64_t>(s.prompt.size()));
    if (s.output_tokens > 0) output_lengths.push_back(s.output_tokens);
    if (!s.source.empty()) ++sources[s.source];
  }
  nlohmann::json j = {{"format", format},
                      {"path", path},
                      {"sha256", sha256},
                      {"samples", samples.size()},
                      {"prompt_tokens", length_stats(prompt_lengths)}};
  if (!output_lengths.empty()) j["output_tokens"] = length_stats(output_lengths);
  if (!sources.empty()) j["sources"] = sources;
  return j;
}

Dataset load_jsonl_dataset(const std::string& path) {
  Dataset d;
  d.format = "jsonl";
  d.path = path;
  d.sha256 = sha256_file(path);
  LineReader lines(path, kMaxJsonlLineBytes, kMaxJsonlBytes);
  for (std::string line; lines.next(line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, lines.line_number());
    const nlohmann::json row = parse_json(line, where);
    MOESERVE_CHECK(row.is_object(), "{}: expected a JSON object", where);
    DatasetSample s;
    for (const char* key : {"input_tokens", "tok_input", "prompt_token_ids", "token_ids"}) {
      if (!row.contains(key)) continue;
      MOESERVE_CHECK(row[key].is_array(), "{}: \"{}\" is not an array of token ids", where, key);
      for (const auto& v : row[key]) {
        MOESERVE_CHECK(v.is_number_integer(), "{}: \"{}\" holds {}, not a token id", where, key,
                       json_excerpt(v));
        s.prompt.push_back(token_id(v.get<int64_t>(), where));
      }
      break;
    }
    MOESERVE_CHECK(!s.prompt.empty(),
                   "{}: no prompt token ids (\"input_tokens\", \"tok_input\", \"prompt_token_ids\" or \"token_ids\"); "
                   "the bench sends token ids, so tokenize text prompts first",
                   where);
    MOESERVE_CHECK(s.prompt.size() <= static_cast<size_t>(kMaxTokensPerSample), "{}: a prompt of {} tokens (at most {})",
                   where, s.prompt.size(), kMaxTokensPerSample);
    if (row.contains("output_tokens") && !row["output_tokens"].is_null())
      s.output_tokens = required_field<int>(row, "output_tokens", where, 1, kMaxTokensPerSample);
    s.source = optional_field<std::string>(row, "dataset", "", where);
    if (row.contains("ground_truth"))
      s.ground_truth =
          row["ground_truth"].is_string() ? row["ground_truth"].get<std::string>() : row["ground_truth"].dump();
    d.samples.push_back(std::move(s));
  }
  MOESERVE_CHECK(!d.samples.empty(), "{}: no samples", path);
  return d;
}

Dataset load_parquet_dataset(const std::string& path) {
  parquet::File file(path);
  Dataset d;
  d.format = "parquet";
  d.path = path;
  d.sha256 = sha256_file(path);
  const char* prompt_column = file.has_column("input_tokens") ? "input_tokens"
                              : file.has_column("tok_input")  ? "tok_input"
                                                              : nullptr;
  MOESERVE_CHECK(prompt_column != nullptr, "{}: no \"input_tokens\" (v4) or \"tok_input\" column with the prompts",
                 path);
  const std::vector<std::vector<int64_t>> prompts = file.read_int_lists(prompt_column);
  std::vector<std::string> sources, truths;
  if (file.has_column("dataset")) sources = file.read_strings("dataset");
  if (file.has_column("ground_truth")) truths = file.read_strings("ground_truth");
  for (size_t i = 0; i < prompts.size(); ++i) {
    DatasetSample s;
    const std::string where = fmt::format("{} row {}", path, i);
    for (int64_t id : prompts[i]) s.prompt.push_back(token_id(id, where));
    MOESERVE_CHECK(!s.prompt.empty(), "{}: empty prompt", where);
    if (!sources.empty()) s.source = sources[i];
    if (!truths.empty()) s.ground_truth = truths[i];
    d.samples.push_back(std::move(s));
  }
  MOESERVE_CHECK(!d.samples.empty(), "{}: no rows", path);
  return d;
}

Dataset make_synthetic_dataset(const SyntheticSpec& spec) {
  MOESERVE_CHECK(spec.samples > 0, "a synthetic dataset needs at least one sample");
  MOESERVE_CHECK(spec.vocab_size > 0, "a synthetic dataset needs a vocabulary size");
  const LengthDistribution input(spec.input_length);
  const LengthDistribution output(spec.output_length);
  Dataset d;
  d.format = "synthetic";
  d.path = fmt::format("synthetic:samples={},input={},output={},vocab={},seed={}", spec.samples, spec.input_length,
                       spec.output_length, spec.vocab_size, spec.seed);
  std::mt19937_64 rng(spec.seed);
  std::uniform_int_distribution<int32_t> token(0, spec.vocab_size - 1);
  std::vector<uint8_t> content;
  for (uint64_t i = 0; i < spec.samples; ++i) {
    DatasetSample s;
    s.prompt.resize(static_cast<size_t>(input.draw(rng)));
    for (int32_t& t : s.prompt) t = token(rng);
    s.output_tokens = std::max(2, output.draw(rng));  // LoadGen needs at least two tokens for a TPOT
    const auto* bytes = reinterpret_cast<const uint8_t*>(s.prompt.data());
    content.insert(content.end(), bytes, bytes + s.prompt.size() * sizeof(int32_t));
    const auto* out = reinterpret_cast<const uint8_t*>(&s.output_tokens);
    content.insert(content.end(), out, out + sizeof(int));
    d.samples.push_back(std::move(s));
  }
  d.sha256 = sha256_hex(content);
  return d;
}

Dataset load_dataset(const std::string& path_or_synthetic, const SyntheticSpec& synthetic) {
  if (path_or_synthetic == "synthetic") return make_synthetic_dataset(synthetic);
  if (ends_with(path_or_synthetic, ".parquet")) return load_parquet_dataset(path_or_synthetic);
  if (ends_with(path_or_synthetic, ".jsonl")) return load_jsonl_dataset(path_or_synthetic);
  fail("--dataset {}: expected a .parquet or .jsonl file, or 'synthetic'", path_or_synthetic);
}

}  // namespace moeserve::bench
