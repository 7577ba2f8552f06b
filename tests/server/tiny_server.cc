#include "server/tiny_server.h"

#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <mutex>

#include "engine/generate.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "server/http_client.h"
#include "test_util.h"

namespace moeserve::testing {

using nlohmann::json;

namespace {

std::shared_ptr<const Checkpoint> checkpoint() {
  static auto c = std::shared_ptr<const Checkpoint>(Checkpoint::open(tiny_model()));
  return c;
}

std::shared_ptr<const Tokenizer> tokenizer() {
  static std::shared_ptr<const Tokenizer> t = Tokenizer::o200k_harmony();
  return t;
}

std::vector<int32_t> prompt(int variant) {
  return {200006, 1428, 200008, 1000 + variant * 37, 2000 + variant, 200007, 200006, 173781};
}

}  // namespace

TinyServer::TinyServer(server::HttpServerOptions http, std::optional<std::string> api_key) {
  EngineConfig config;
  config.num_kv_blocks = 4096;
  engine = std::make_shared<Engine>(std::make_shared<CpuRunner>(checkpoint(), 2), config);
  server::ServerOptions options;
  options.http = std::move(http);
  options.http.port = 0;
  options.served_model_name = "tiny";
  options.api_key = std::move(api_key);
  server = std::make_unique<server::OpenAiServer>(engine, tokenizer(), options);
  server->start();
  port = server->port();
}

TinyServer::~TinyServer() { server->shutdown(); }

json tiny_completion(int prompt_variant, int max_tokens, bool stream) {
  return {{"model", "tiny"},         {"prompt", prompt(prompt_variant)}, {"max_tokens", max_tokens},
          {"temperature", 0},        {"ignore_eos", true},               {"stream", stream}};
}

std::vector<int32_t> tiny_completion_tokens(int prompt_variant, int max_tokens) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, std::vector<int32_t>> known;
  std::lock_guard lock(mutex);
  auto& tokens = known[{prompt_variant, max_tokens}];
  if (tokens.empty()) {
    CpuRunner reference(checkpoint(), 2);
    GenerateOptions options;
    options.max_tokens = max_tokens;
    options.sampling.temperature = 0;
    tokens = generate_sequence(reference, prompt(prompt_variant), options).tokens;
  }
  return tokens;
}

std::vector<int32_t> completion_tokens(const std::string& body, bool streamed) {
  std::vector<int32_t> tokens;
  auto take = [&](const json& chunk) {
    for (const auto& id : chunk["choices"][0]["token_ids"]) tokens.push_back(id.get<int32_t>());
  };
  if (!streamed) {
    const json parsed = json::parse(body, nullptr, false);
    if (parsed.is_object() && parsed.contains("choices")) take(parsed);
    return tokens;
  }
  for (const auto& data : sse_data(body)) {
    const json chunk = json::parse(data, nullptr, false);
    if (chunk.is_object() && chunk.contains("choices") && !chunk["choices"].empty()) take(chunk);
  }
  return tokens;
}

size_t resident_bytes() {
  malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void expect_api_error(const HttpResult& response, unsigned status, const std::string& fragment) {
  EXPECT_EQ(response.status, status) << response.body;
  EXPECT_EQ(response.headers.count("content-type") ? response.headers.at("content-type") : "", "application/json");
  const json body = json::parse(response.body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains("error") && body["error"].is_object()) << response.body;
  EXPECT_TRUE(body["error"]["message"].is_string() && body["error"]["type"].is_string()) << response.body;
  EXPECT_NE(body["error"].value("message", "").find(fragment), std::string::npos) << response.body;
}

void expect_still_serving(uint16_t port) {
  EXPECT_EQ(http_request(port, "GET", "/health").status, 200u);
  const auto r = post_json(port, "/v1/completions", tiny_completion(0, 4, false));
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(completion_tokens(r.body, false), tiny_completion_tokens(0, 4));
}

}  // namespace moeserve::testing
