#include "eval/offline_scoring.h"

#include <fmt/format.h>

#include <filesystem>
#include <map>
#include <set>

#include "bench/parquet/reader.h"
#include "eval/json_lines.h"
#include "eval/python_text.h"
#include "util/error.h"

namespace moeserve::eval {
namespace {

std::string json_text(const nlohmann::json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return {};
  return value.dump();
}


}  // namespace

std::shared_ptr<const Tokenizer> open_gpt_oss_tokenizer(const std::string& tokenizer_path) {
  if (tokenizer_path.empty()) return Tokenizer::o200k_harmony();
  if (std::filesystem::is_directory(tokenizer_path)) return Tokenizer::from_model_dir(tokenizer_path);
  return Tokenizer::from_file(tokenizer_path);
}

Detokenizer gpt_oss_detokenizer(const std::string& tokenizer_path) {
  std::shared_ptr<const Tokenizer> tokenizer = open_gpt_oss_tokenizer(tokenizer_path);
  return [tokenizer](std::span<const int32_t> tokens) { return tokenizer->decode(tokens); };
}

Detokenizer deepseek_r1_detokenizer(const std::string& tokenizer_path) {
  MOESERVE_CHECK(!tokenizer_path.empty(),
                 "deepseek-r1 rules decode the log with DeepSeek-R1's tokenizer: give --tokenizer (its tokenizer.json or "
                 "the model directory)");
  std::shared_ptr<const Tokenizer> tokenizer = open_gpt_oss_tokenizer(tokenizer_path);
  MOESERVE_CHECK(tokenizer->merges_by_list(), "{} is not a DeepSeek tokenizer (o200k's cannot decode DeepSeek-R1 ids)",
                 tokenizer_path);
  return [tokenizer](std::span<const int32_t> tokens) { return tokenizer->decode_skipping_special(tokens); };
}

std::vector<ReferenceRow> load_reference(const std::string& path) {
  std::vector<ReferenceRow> rows;
  if (path.ends_with(".parquet")) {
    const bench::parquet::File file(path);
    const std::vector<std::string> datasets = file.read_strings("dataset");
    const std::vector<std::string> truths = file.read_strings("ground_truth");
    for (size_t i = 0; i < datasets.size(); ++i) {
      MOESERVE_CHECK(!datasets[i].empty(), "{}: row {}: Dataset name cannot be empty", path, i);
      rows.push_back({datasets[i], truths[i]});
    }
    return rows;
  }
  for_each_json_line(path, [&](const nlohmann::json& row, size_t) {
    MOESERVE_CHECK(row.is_object() && row.contains("dataset") && row.contains("ground_truth"),
                   "a reference row needs \"dataset\" and \"ground_truth\"");
    const std::string dataset = json_text(row["dataset"]);
    MOESERVE_CHECK(!dataset.empty(), "Dataset name cannot be empty");
    rows.push_back({dataset, json_text(row["ground_truth"])});
  });
  return rows;
}

std::vector<ModelOutput> outputs_from_log(const std::vector<AccuracyLogEntry>& entries, size_t reference_rows,
                                          const Detokenizer& detokenize, Rules rules,
                                          std::vector<std::string>& warnings) {
  std::vector<ModelOutput> outputs;
  std::set<int64_t> seen;
  for (const AccuracyLogEntry& e : entries) {
    if (rules == Rules::deepseek_r1 && !seen.insert(e.qsl_idx).second) continue;  // duplicates skipped
    if (e.qsl_idx < 0 || static_cast<size_t>(e.qsl_idx) >= reference_rows) {
      warnings.push_back(fmt::format("qsl_idx {} out of range (max: {})", e.qsl_idx,
                                     static_cast<int64_t>(reference_rows) - 1));
      continue;
    }
    std::vector<int32_t> tokens;
    try {
      tokens = hex_to_int32(e.data);
    } catch (const Error& error) {
      fail("accuracy log record seq_id {} qsl_idx {}: {}", e.seq_id, e.qsl_idx, error.what());
    }
    outputs.push_back({e.seq_id, e.qsl_idx, detokenize(tokens), static_cast<int64_t>(tokens.size())});
  }
  return outputs;
}

std::vector<ModelOutput> load_outputs(const std::string& path) {
  std::vector<ModelOutput> outputs;
  for_each_json_line(path, [&](const nlohmann::json& row, size_t) {
    MOESERVE_CHECK(row.is_object() && row.contains("qsl_idx") && row.contains("text"),
                   "an output row needs \"qsl_idx\" and \"text\"");
    outputs.push_back({row.value("seq_id", static_cast<int64_t>(outputs.size())), row["qsl_idx"].get<int64_t>(),
                       row["text"].get<std::string>(), row.value("token_count", int64_t{0})});
  });
  return outputs;
}

OfflineResult score_outputs(std::vector<ModelOutput> outputs, const std::vector<ReferenceRow>& reference,
                            const SampleScorer& scorer, Rules rules) {
  OfflineResult result;
  result.rules = rules;
  std::vector<SampleToScore> samples;
  for (const ModelOutput& o : outputs) {
    MOESERVE_CHECK(o.qsl_idx >= 0 && static_cast<size_t>(o.qsl_idx) < reference.size(),
                   "output seq_id {}: qsl_idx {} is not in the reference ({} rows)", o.seq_id, o.qsl_idx,
                   reference.size());
    ReferenceRow row = reference[static_cast<size_t>(o.qsl_idx)];
    row.dataset = ascii_lower(row.dataset);  // validate_dataset_name
    samples.push_back({row.dataset, row.ground_truth, o.text});
    result.references.push_back(std::move(row));
  }
  result.scores = scorer.score(samples);
  result.outputs = std::move(outputs);

  std::map<std::string, DatasetTally> tallies;
  double correct_sum = 0;
  double tokens_sum = 0;
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    DatasetTally& t = tallies[result.references[i].dataset];
    t.dataset = result.references[i].dataset;
    t.repeats = mlperf_dataset_repeats(t.dataset);
    ++t.total;
    t.correct += result.scores[i].correct;
    correct_sum += result.scores[i].correct ? 100.0 : 0.0;
    tokens_sum += static_cast<double>(result.outputs[i].token_count);
  }
  for (auto& [name, tally] : tallies) result.tallies.push_back(tally);
  const double n = static_cast<double>(result.outputs.size());
  if (rules == Rules::gpt_oss) {
    result.exact_match = mlperf_final_score(result.tallies);
  } else {
    result.exact_match = n > 0 ? correct_sum / n : 0.0;
  }
  result.tokens_per_sample = n > 0 ? tokens_sum / n : 0.0;
  return result;
}

std::string offline_report_text(const OfflineResult& result) {
  std::string out;
  for (const std::string& w : result.warnings) out += fmt::format("warning: {}\n", w);
  int64_t correct = 0;
  int64_t total = 0;
  for (const DatasetTally& t : result.tallies) {
    correct += t.correct;
    total += t.total;
  }
  const std::string rule(80, '=');
  out += fmt::format("{}\nMLPerf Accuracy Evaluation Results ({} rules)\n{}\n", rule, rules_name(result.rules), rule);
  out += fmt::format("Total samples evaluated: {}\n", total);
  out += fmt::format("Overall raw accuracy: {:.2f}% ({}/{})\n\n", total > 0 ? 100.0 * correct / total : 0.0, correct,
                     total);
  out += fmt::format("{:25} {:>8} {:>8} {:>8} {:>10} {:>10}\n", "Dataset", "Correct", "Total", "Repeats", "Score",
                     "Accuracy");
  for (const DatasetTally& t : result.tallies) {
    out += fmt::format("{:25} {:8} {:8} {:8} {:10.2f} {:9.2f}%\n", t.dataset, t.correct, t.total, t.repeats,
                       static_cast<double>(t.correct) / t.repeats, t.total > 0 ? 100.0 * t.correct / t.total : 0.0);
  }
  out += rule + "\n";
  // The submission checker's targets (tools/submission/submission_checker/constants.py), meaningful on the full
  // accuracy sets.
  const auto verdict = [](bool pass) { return pass ? "PASS" : "FAIL"; };
  if (result.rules == Rules::gpt_oss) {
    out += fmt::format("\nFINAL SCORE: {:.2f}%\n\n'exact_match': {:.3f}\n", result.exact_match, result.exact_match);
    const double target = 0.99 * 83.13;
    out += fmt::format("MLPerf target (gpt-oss-120b): exact_match >= {:.4f}: {}\n", target,
                       verdict(result.exact_match >= target));
  } else {
    out += fmt::format("\n{{'exact_match': {}, 'tokens_per_sample': {}, 'num-samples': {}}}\n",
                       python_float_text(result.exact_match), python_float_text(result.tokens_per_sample),
                       result.outputs.size());
    const double target = 0.99 * 81.3582;
    const double low = 0.9 * 3886.2274;
    const double high = 1.1 * 3886.2274;
    out += fmt::format("MLPerf target (deepseek-r1): exact_match >= {:.4f}: {}; tokens per sample in [{:.4f}, {:.4f}]: "
                       "{}\n",
                       target, verdict(result.exact_match >= target), low, high,
                       verdict(result.tokens_per_sample >= low && result.tokens_per_sample <= high));
  }
  return out;
}

nlohmann::json offline_result_json(const OfflineResult& result) {
  nlohmann::json per_dataset = nlohmann::json::object();
  for (const DatasetTally& t : result.tallies) {
    per_dataset[t.dataset] = {{"correct", t.correct},
                              {"total", t.total},
                              {"repeats", t.repeats},
                              {"accuracy", t.total > 0 ? 100.0 * t.correct / t.total : 0.0}};
  }
  nlohmann::json details = nlohmann::json::array();
  for (size_t i = 0; i < result.outputs.size(); ++i) {
    const ScoredSample& s = result.scores[i];
    details.push_back({{"seq_id", result.outputs[i].seq_id},
                       {"qsl_idx", result.outputs[i].qsl_idx},
                       {"dataset", result.references[i].dataset},
                       {"is_correct", s.correct},
                       {"extracted_answer", s.extracted ? nlohmann::json(*s.extracted) : nlohmann::json()},
                       {"ground_truth", result.references[i].ground_truth},
                       {"evaluation_details", s.detail},
                       {"token_count", result.outputs[i].token_count}});
  }
  return {{"summary",
           {{"rules", rules_name(result.rules)},
            {"exact_match", result.exact_match},
            {"tokens_per_sample", result.tokens_per_sample},
            {"num_samples", result.outputs.size()},
            {"per_dataset", per_dataset},
            {"warnings", result.warnings}}},
          {"detailed_results", details}};
}

}  // namespace moeserve::eval
