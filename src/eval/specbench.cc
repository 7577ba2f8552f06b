#include "eval/specbench.h"

#include "eval/chat_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "bench/parquet/reader.h"
#include "eval/chat_format.h"
#include "eval/json_lines.h"
#include "harmony/completion.h"
#include "util/error.h"

namespace moeserve::eval {
namespace {

// What SPEED-Bench ships in rows whose text comes from other datasets (its prepare_data.py resolves them).
constexpr std::string_view kPlaceholder = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE";

void check_item(const SpecBenchItem& item, const std::string& where) {
  MOESERVE_CHECK(!item.turns.empty(), "{}: question {} has no turns", where, item.question_id);
  for (const std::string& turn : item.turns)
    MOESERVE_CHECK(turn.find(kPlaceholder) == std::string::npos,
                   "{}: question {} holds SPEED-Bench's placeholder instead of a turn; prepare the data with "
                   "specdec_bench's prepare_data.py first",
                   where, item.question_id);
}

std::vector<SpecBenchItem> load_parquet(const std::string& path) {
  bench::parquet::File file(path);
  const auto ids = file.read_strings("question_id");
  const auto categories = file.read_strings("category");
  const auto turns = file.read_string_lists("turns");
  std::vector<SpecBenchItem> items;
  for (size_t i = 0; i < ids.size(); ++i) {
    items.push_back({ids[i], categories[i], turns[i]});
    check_item(items.back(), fmt::format("{} row {}", path, i));
  }
  return items;
}

std::vector<SpecBenchItem> load_jsonl(const std::string& path) {
  std::vector<SpecBenchItem> items;
  for_each_json_line(path, [&](const nlohmann::json& row, size_t line) {
    const std::string where = fmt::format("{}:{}", path, line);
    MOESERVE_CHECK(row.is_object(), "{}: not a JSON object", where);
    for (const char* field : {"question_id", "category", "turns"})
      MOESERVE_CHECK(row.contains(field), "{}: missing \"{}\"", where, field);
    const auto& id = row["question_id"];
    MOESERVE_CHECK(id.is_string() || id.is_number_integer(), "{}: \"question_id\" is {}, not text or an integer", where,
                   id.dump());
    MOESERVE_CHECK(row["category"].is_string(), "{}: \"category\" is not text", where);
    MOESERVE_CHECK(row["turns"].is_array(), "{}: \"turns\" is not a list", where);
    SpecBenchItem item{id.is_string() ? id.get<std::string>() : id.dump(), row["category"].get<std::string>(), {}};
    for (const auto& turn : row["turns"]) {
      MOESERVE_CHECK(turn.is_string(), "{}: a turn is {}, not text", where, turn.dump());
      item.turns.push_back(turn.get<std::string>());
    }
    check_item(item, where);
    items.push_back(std::move(item));
  });
  return items;
}

}  // namespace

std::vector<SpecBenchItem> load_specbench_items(const std::string& path) {
  const std::string extension = std::filesystem::path(path).extension().string();
  std::vector<SpecBenchItem> items;
  if (extension == ".parquet")
    items = load_parquet(path);
  else if (extension == ".jsonl")
    items = load_jsonl(path);
  else
    fail("{}: a SPEED-Bench dataset is a .parquet or .jsonl file", path);
  MOESERVE_CHECK(!items.empty(), "{}: no questions", path);
  return items;
}

TurnGenerator engine_turn_generator(Engine& engine, int max_tokens, int concurrency, std::vector<int32_t> stop_tokens,
                                    bench::WorkProgress* progress) {
  return [&engine, max_tokens, concurrency, stop_tokens, progress](const std::vector<std::vector<int32_t>>& prompts) {
    std::vector<TurnOutput> outputs(prompts.size());
    std::mutex mutex;
    std::condition_variable changed;
    size_t next = 0, in_flight = 0;
    const size_t limit = concurrency > 0 ? static_cast<size_t>(concurrency) : prompts.size();
    std::unique_lock lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return in_flight < limit || next == prompts.size(); });
      if (next == prompts.size()) break;
      RequestSpec spec;
      spec.prompt = prompts[next];
      spec.sampling.temperature = 0.0f;  // SPEED-Bench's default: greedy
      spec.max_tokens = max_tokens;
      spec.stop_tokens = stop_tokens;
      const size_t i = next++;
      ++in_flight;
      // Not holding the lock while submitting: the engine thread may be delivering an event into the callback.
      lock.unlock();
      try {
        engine.submit(std::move(spec), [&, i](const RequestEvent& event) {
          std::lock_guard guard(mutex);
          TurnOutput& out = outputs[i];
          if (!event.tokens.empty()) {
            out.tokens.insert(out.tokens.end(), event.tokens.begin(), event.tokens.end());
            out.event_tokens.push_back(static_cast<int>(event.tokens.size()));
          }
          if (event.finish == FinishReason::none) return;
          if (event.finish == FinishReason::error || event.finish == FinishReason::cancelled)
            out.error = event.error.empty() ? finish_reason_name(event.finish) : event.error;
          if (progress) progress->finished(static_cast<int64_t>(out.tokens.size()), !out.error.empty());
          --in_flight;
          changed.notify_all();
        });
        lock.lock();
      } catch (const Error& e) {
        lock.lock();
        outputs[i].error = e.what();
        if (progress) progress->finished(0, true);
        --in_flight;
      }
    }
    changed.wait(lock, [&] { return in_flight == 0; });
    return outputs;
  };
}

std::optional<double> SpecBenchRequestResult::acceptance_length() const {
  if (!error.empty() || steps == 0) return std::nullopt;
  return static_cast<double>(tokens) / static_cast<double>(steps);
}

void count_turn_steps(const std::vector<int>& event_tokens, SpecBenchRequestResult& request) {
  ++request.turns;
  for (size_t e = 1; e < event_tokens.size(); ++e) {
    ++request.steps;
    request.tokens += event_tokens[e];
  }
}

void average_acceptance(SpecBenchResult& result) {
  result.categories.clear();
  result.overall = {};
  std::map<std::string, double> sums;
  double overall_sum = 0;
  for (const SpecBenchRequestResult& r : result.requests) {
    const std::optional<double> al = r.acceptance_length();
    result.categories[r.category];  // listed even when none of its requests has a length
    if (!al) continue;
    sums[r.category] += *al;
    ++result.categories[r.category].requests;
    overall_sum += *al;
    ++result.overall.requests;
  }
  for (auto& [category, average] : result.categories)
    if (average.requests > 0) average.acceptance_length = sums[category] / average.requests;
  if (result.overall.requests > 0) result.overall.acceptance_length = overall_sum / result.overall.requests;
}

SpecBenchResult run_specbench(const std::vector<SpecBenchItem>& items, const Tokenizer& tokenizer,
                              harmony::ReasoningEffort effort, const TurnGenerator& generate) {
  SpecBenchResult result;
  const EvalChatFormat format(tokenizer);
  std::vector<harmony::Conversation> conversations(items.size(), {harmony::system_message(effort)});
  for (const SpecBenchItem& item : items) {
    SpecBenchRequestResult request;
    request.question_id = item.question_id;
    request.category = item.category;
    result.requests.push_back(std::move(request));
  }
  size_t max_turns = 0;
  for (const SpecBenchItem& item : items) max_turns = std::max(max_turns, item.turns.size());
  for (size_t turn = 0; turn < max_turns; ++turn) {
    std::vector<size_t> active;
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < items.size(); ++i) {
      if (turn >= items[i].turns.size() || !result.requests[i].error.empty()) continue;
      conversations[i].push_back(harmony::Message::text(harmony::Role::user, items[i].turns[turn]));
      prompts.push_back(format.render(conversations[i]));
      active.push_back(i);
    }
    const std::vector<TurnOutput> outputs = generate(prompts);
    MOESERVE_CHECK(outputs.size() == prompts.size(), "specbench: {} outputs for {} prompts", outputs.size(),
                   prompts.size());
    for (size_t a = 0; a < active.size(); ++a) {
      SpecBenchRequestResult& request = result.requests[active[a]];
      if (!outputs[a].error.empty()) {
        request.error = fmt::format("turn {}: {}", turn + 1, outputs[a].error);
        continue;
      }
      count_turn_steps(outputs[a].event_tokens, request);
      // specdec_bench's postprocessing: only the answer goes into the history.
      conversations[active[a]].push_back(
          harmony::Message::text(harmony::Role::assistant, format.answer(outputs[a].tokens)).with_channel("final"));
    }
  }
  average_acceptance(result);
  return result;
}

nlohmann::json SpecBenchResult::to_json() const {
  auto average = [](const Average& a) {
    return nlohmann::json{{"requests", a.requests},
                          {"acceptance_length", a.requests > 0 ? nlohmann::json(a.acceptance_length) : nullptr}};
  };
  nlohmann::json j = {{"overall", average(overall)}, {"categories", nlohmann::json::object()}};
  for (const auto& [category, a] : categories) j["categories"][category] = average(a);
  j["requests"] = nlohmann::json::array();
  for (const SpecBenchRequestResult& r : requests) {
    const std::optional<double> al = r.acceptance_length();
    nlohmann::json row = {{"question_id", r.question_id},
                          {"category", r.category},
                          {"turns", r.turns},
                          {"steps", r.steps},
                          {"tokens", r.tokens},
                          {"acceptance_length", al ? nlohmann::json(*al) : nullptr}};
    if (!r.error.empty()) row["error"] = r.error;
    j["requests"].push_back(std::move(row));
  }
  return j;
}

std::string SpecBenchResult::table() const {
  size_t width = std::string("overall").size();
  for (const auto& [category, a] : categories) width = std::max(width, category.size());
  std::string out = fmt::format("{:<{}}  {:>8}  {:>17}\n", "category", width, "requests", "acceptance length");
  auto line = [&](const std::string& name, const Average& a) {
    const std::string al = a.requests > 0 ? fmt::format("{:.3f}", a.acceptance_length) : "-";
    out += fmt::format("{:<{}}  {:>8}  {:>17}\n", name, width, a.requests, al);
  };
  for (const auto& [category, a] : categories) line(category, a);
  line("overall", overall);
  return out;
}

}  // namespace moeserve::eval
