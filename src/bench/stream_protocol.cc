#include "bench/stream_protocol.h"

#include <fmt/format.h>

#include <limits>

#include "util/error.h"

namespace moeserve::bench {
namespace {

// A server's numbers are checked before use: a wrong type or an absurd value fails the sample, naming the field.
int64_t integer_in(const nlohmann::json& value, const char* field, int64_t max) {
  MOESERVE_CHECK(value.is_number_integer(), "{} is {}, not an integer", field, value.dump().substr(0, 40));
  MOESERVE_CHECK(!value.is_number_unsigned() || value.get<uint64_t>() <= static_cast<uint64_t>(max),
                 "{} {} is out of range", field, value.dump());
  const auto v = value.get<int64_t>();
  MOESERVE_CHECK(v >= 0 && v <= max, "{} {} is out of range [0, {}]", field, v, max);
  return v;
}
int32_t token_id(const nlohmann::json& value, const char* field) {
  return static_cast<int32_t>(integer_in(value, field, std::numeric_limits<int32_t>::max()));
}
// Counts up to 2^40 tokens: beyond any context, small enough for every sum made of them.
int64_t token_count(const nlohmann::json& value, const char* field) {
  return integer_in(value, field, int64_t{1} << 40);
}

}  // namespace

HttpApi parse_http_api(std::string_view name) {
  if (name == "openai") return HttpApi::openai;
  if (name == "sglang") return HttpApi::sglang;
  fail("--api {}: expected openai or sglang", name);
}

HttpEndpoint parse_endpoint(const std::string& url) {
  const std::string scheme = "http://";
  MOESERVE_CHECK(url.rfind("https://", 0) != 0, "--endpoint {}: https is not supported (use http to a local server)",
                 url);
  MOESERVE_CHECK(url.rfind(scheme, 0) == 0, "--endpoint {}: expected http://host[:port][/path]", url);
  std::string rest = url.substr(scheme.size());
  HttpEndpoint e;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    e.base_path = rest.substr(slash);
    rest = rest.substr(0, slash);
    while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
  }
  const size_t colon = rest.rfind(':');
  e.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  e.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  MOESERVE_CHECK(!e.host.empty() && !e.port.empty(), "--endpoint {}: no host or port", url);
  return e;
}

std::string request_path(HttpApi api, const HttpEndpoint& endpoint) {
  return endpoint.base_path + (api == HttpApi::openai ? "/v1/completions" : "/generate");
}

std::string request_body(HttpApi api, const SampleRequest& sample, const std::string& model) {
  nlohmann::json body;
  const std::vector<int32_t> prompt(sample.prompt.begin(), sample.prompt.end());
  const SamplingParams& s = sample.sampling;
  if (api == HttpApi::openai) {
    body = {{"model", model},
            {"prompt", prompt},
            {"max_tokens", sample.max_tokens},
            {"temperature", s.temperature},
            {"top_p", s.top_p},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"return_token_ids", true},
            {"skip_special_tokens", false}};
    if (s.top_k > 0) body["top_k"] = s.top_k;
    if (sample.min_tokens > 0) {
      body["min_tokens"] = sample.min_tokens;
      body["ignore_eos"] = true;
    }
  } else {
    nlohmann::json params = {{"max_new_tokens", sample.max_tokens},
                             {"temperature", s.temperature},
                             {"top_p", s.top_p},
                             {"top_k", s.top_k > 0 ? s.top_k : -1},
                             {"skip_special_tokens", false}};
    if (sample.min_tokens > 0) {
      params["min_new_tokens"] = sample.min_tokens;
      params["ignore_eos"] = true;
    }
    body = {{"input_ids", prompt}, {"sampling_params", params}, {"stream", true}};
  }
  return body.dump();
}

StreamDecoder::Update StreamDecoder::feed(std::string_view bytes) {
  Update update;
  pending_.append(bytes);
  size_t start = 0;
  for (size_t newline; (newline = pending_.find('\n', start)) != std::string::npos; start = newline + 1) {
    std::string_view line(pending_.data() + start, newline - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // Server-sent events: only "data:" lines matter; comments (":") and other fields are skipped.
    if (line.rfind("data:", 0) != 0) continue;
    line.remove_prefix(5);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (!done_) on_event(line, update);
  }
  pending_.erase(0, start);
  update.done = done_;
  return update;
}

void StreamDecoder::on_event(std::string_view data, Update& update) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  nlohmann::json chunk;
  try {
    chunk = nlohmann::json::parse(data);
  } catch (const nlohmann::json::exception& e) {
    error_ = fmt::format("unreadable event '{}': {}", std::string(data.substr(0, 200)), e.what());
    done_ = true;
    return;
  }
  if (chunk.contains("error")) {
    const auto& e = chunk["error"];
    error_ = e.is_object() && e.contains("message") ? e["message"].dump() : e.dump();
    done_ = true;
    return;
  }
  try {
    if (api_ == HttpApi::openai) {
      on_openai(chunk, update);
    } else {
      on_sglang(chunk, update);
    }
  } catch (const Error& e) {
    error_ = fmt::format("event '{}': {}", std::string(data.substr(0, 200)), e.what());
    done_ = true;
  }
}

void StreamDecoder::on_openai(const nlohmann::json& chunk, Update& update) {
  if (chunk.contains("usage") && chunk["usage"].is_object() && chunk["usage"].contains("completion_tokens"))
    reported_count_ = token_count(chunk["usage"]["completion_tokens"], "usage.completion_tokens");
  if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty()) return;
  const nlohmann::json& choice = chunk["choices"][0];
  if (!choice.is_object()) return;
  if (choice.contains("token_ids") && choice["token_ids"].is_array()) {
    ids_seen_ = true;
    for (const auto& id : choice["token_ids"]) tokens_.push_back(token_id(id, "choices[0].token_ids[]"));
  }
  if (choice.contains("text") && choice["text"].is_string() && !choice["text"].get_ref<const std::string&>().empty())
    ++text_chunks_;
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
    finish_reason_ = choice["finish_reason"].get<std::string>();
  note_progress(update);
}

void StreamDecoder::on_sglang(const nlohmann::json& chunk, Update& update) {
  if (!chunk.is_object()) return;
  const nlohmann::json* meta =
      chunk.contains("meta_info") && chunk["meta_info"].is_object() ? &chunk["meta_info"] : nullptr;
  const bool has_ids = chunk.contains("output_ids") && chunk["output_ids"].is_array();
  if (meta && meta->contains("completion_tokens")) {
    const int64_t count = token_count((*meta)["completion_tokens"], "meta_info.completion_tokens");
    const int64_t seen = reported_count_.value_or(0);
    if (count > seen) {
      // The new ids are the last (count - seen) output_ids, whether the server sends them cumulatively or not.
      const auto fresh = static_cast<size_t>(count - seen);
      if (has_ids && chunk["output_ids"].size() >= fresh) {
        ids_seen_ = true;
        const auto& ids = chunk["output_ids"];
        for (size_t i = ids.size() - fresh; i < ids.size(); ++i) tokens_.push_back(token_id(ids[i], "output_ids[]"));
      } else {
        ids_broken_ = true;  // a gap: the ids no longer add up to the count
      }
      reported_count_ = count;
    }
  } else if (has_ids) {
    ids_seen_ = true;
    for (const auto& id : chunk["output_ids"]) tokens_.push_back(token_id(id, "output_ids[]"));
  }
  if (chunk.contains("text") && chunk["text"].is_string() && !chunk["text"].get_ref<const std::string&>().empty())
    ++text_chunks_;
  if (meta && meta->contains("finish_reason") && (*meta)["finish_reason"].is_object()) {
    const auto& reason = (*meta)["finish_reason"];
    finish_reason_ = reason.contains("type") && reason["type"].is_string() ? reason["type"].get<std::string>()
                                                                           : reason.dump();
  }
  note_progress(update);
}

void StreamDecoder::note_progress(Update& update) {
  if (first_token_sent_) return;
  const bool has_token = !tokens_.empty() || text_chunks_ > 0 || reported_count_.value_or(0) > 0;
  if (!has_token) return;
  first_token_sent_ = true;
  update.first_token = true;
  if (ids_seen_ && !ids_broken_ && !tokens_.empty()) update.first_token_id = tokens_.front();
}

SampleOutput StreamDecoder::finish() {
  SampleOutput out;
  out.error = error_;
  out.finish_reason = finish_reason_;
  if (ids_seen_ && !ids_broken_) {
    out.token_ids_known = true;
    out.token_count = static_cast<int64_t>(tokens_.size());
    out.tokens = std::move(tokens_);
  } else {
    out.token_ids_known = false;
    out.token_count = reported_count_.value_or(text_chunks_);
  }
  return out;
}

}  // namespace moeserve::bench
