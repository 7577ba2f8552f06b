#include "bench/pubmed.h"

#include <fmt/format.h>

#include "harmony/render.h"
#include "util/bounded_read.h"
#include "util/error.h"
#include "util/files.h"
#include "util/json_parse.h"

namespace moeserve::bench {

const char* const kSummarizationInstructions =
    "You are an expert at reading and summarizing academic research papers. Your task is to provide clear and "
    "comprehensive summaries. Cover the research purpose, methods, main findings, and significance. Be thorough "
    "but avoid unnecessary details. Ignore citations and references.";

namespace {

std::string join_sentences(const nlohmann::json& sentences, const std::string& where, const char* field) {
  MOESERVE_CHECK(sentences.is_array(), "{}: \"{}\" is not a list of sentences", where, field);
  std::string text;
  for (const auto& s : sentences) {
    MOESERVE_CHECK(s.is_string(), "{}: \"{}\" holds a non-string", where, field);
    if (!text.empty()) text += ' ';
    text += s.get<std::string>();
  }
  return text;
}

// The abstract without its <S> ... </S> sentence markers.
std::string plain_abstract(std::string text) {
  for (const std::string marker : {"<S>", "</S>"}) {
    for (size_t at; (at = text.find(marker)) != std::string::npos;) text.erase(at, marker.size());
  }
  return text;
}

}  // namespace

Dataset load_pubmed_dataset(const std::string& path, const Tokenizer& tokenizer, harmony::ReasoningEffort effort) {
  LineReader lines(path, kMaxJsonlLineBytes, kMaxJsonlBytes);
  Dataset d;
  d.format = "pubmed";
  d.path = fmt::format("{} (Harmony, reasoning {})", path, harmony::reasoning_effort_name(effort));
  std::string rendered_ids;  // the dataset's identity is its token ids, which depend on the rendering too
  for (std::string line; lines.next(line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, lines.line_number());
    const nlohmann::json row = parse_json(line, where);
    MOESERVE_CHECK(row.is_object() && row.contains("article_text"), "{}: no \"article_text\"", where);
    harmony::SystemContent system;
    system.reasoning_effort = effort;
    system.conversation_start_date = "2025-09-30";
    harmony::DeveloperContent developer;
    developer.instructions = kSummarizationInstructions;
    harmony::Conversation conversation;
    conversation.push_back(harmony::Message{harmony::Role::system, {}, {}, {}, {}, std::move(system)});
    conversation.push_back(harmony::Message{harmony::Role::developer, {}, {}, {}, {}, std::move(developer)});
    conversation.push_back(
        harmony::Message::text(harmony::Role::user, join_sentences(row["article_text"], where, "article_text")));
    DatasetSample s;
    s.prompt = harmony::render_conversation_for_completion(tokenizer, conversation);
    s.source = "pubmed_summarization";
    if (row.contains("abstract_text"))
      s.ground_truth = plain_abstract(join_sentences(row["abstract_text"], where, "abstract_text"));
    rendered_ids.append(reinterpret_cast<const char*>(s.prompt.data()), s.prompt.size() * sizeof(int32_t));
    d.samples.push_back(std::move(s));
  }
  MOESERVE_CHECK(!d.samples.empty(), "{}: no articles", path);
  d.sha256 = sha256_hex(std::span(reinterpret_cast<const uint8_t*>(rendered_ids.data()), rendered_ids.size()));
  return d;
}

}  // namespace moeserve::bench
