// A bounded load test: over a thousand concurrent streaming requests on the tiny model, from one asynchronous
// client. Every stream must complete without error, carry exactly the tokens the request gives alone (nothing
// lost or duplicated), and the server's memory must return to its level after a warm-up of the same shape.
#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "engine/generate.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "server/http_client.h"
#include "server/openai_server.h"
#include "server/tiny_server.h"
#include "test_util.h"

namespace moeserve {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

struct Stream : std::enable_shared_from_this<Stream> {
  net::ip::tcp::socket socket;
  beast::flat_buffer buffer;
  http::request<http::string_body> request;
  http::response_parser<http::string_body> parser;
  std::vector<int32_t> tokens;
  std::string error;
  bool done = false;

  Stream(net::io_context& ioc, const json& body) : socket(ioc) {
    request = {http::verb::post, "/v1/completions", 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.body() = body.dump();
    request.prepare_payload();
    parser.body_limit(1 << 24);
  }

  void run(uint16_t port) {
    auto self = shared_from_this();
    socket.async_connect({net::ip::make_address("127.0.0.1"), port}, [self](beast::error_code ec) {
      if (ec) return self->fail("connect: " + ec.message());
      http::async_write(self->socket, self->request, [self](beast::error_code ec, size_t) {
        if (ec) return self->fail("write: " + ec.message());
        http::async_read(self->socket, self->buffer, self->parser, [self](beast::error_code ec, size_t) {
          if (ec) return self->fail("read: " + ec.message());
          self->finish();
        });
      });
    });
  }
  void fail(std::string why) {
    error = std::move(why);
    done = true;
  }
  void finish() {
    done = true;
    if (parser.get().result_int() != 200) return fail("status " + std::to_string(parser.get().result_int()));
    auto events = testing::sse_data(parser.get().body());
    if (events.empty() || events.back() != "[DONE]") return fail("stream did not end with [DONE]");
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      json chunk = json::parse(events[i], nullptr, false);
      if (chunk.is_discarded() || chunk.contains("error")) return fail("bad chunk: " + events[i]);
      for (const auto& id : chunk["choices"][0]["token_ids"]) tokens.push_back(id);
    }
  }
};

TEST(ServerLoad, ThousandsOfConcurrentStreamsLoseNoToken) {
  auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(testing::tiny_model()));
  EngineConfig config;
  config.num_kv_blocks = 8192;
  config.scheduler.max_num_seqs = 256;
  auto engine = std::make_shared<Engine>(std::make_shared<CpuRunner>(checkpoint, 2), config);
  server::ServerOptions options;
  options.http.port = 0;
  options.served_model_name = "tiny";
  server::OpenAiServer server(engine, Tokenizer::o200k_harmony(), options);
  server.start();

  // Eight distinct prompts; what each gives alone, greedy.
  const int kMaxTokens = 5;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> expected;
  CpuRunner reference(checkpoint, 2);
  for (int p = 0; p < 8; ++p) {
    prompts.push_back({200006, 1428, 200008, 1000 + p * 37, 2000 + p, 200007, 200006, 173781});
    GenerateOptions o;
    o.max_tokens = kMaxTokens;
    o.sampling.temperature = 0;
    expected.push_back(generate_sequence(reference, prompts.back(), o).tokens);
  }
  auto run_round = [&](int count) {
    net::io_context ioc;
    std::vector<std::shared_ptr<Stream>> streams;
    for (int i = 0; i < count; ++i) {
      json body = {{"model", "tiny"}, {"prompt", prompts[i % 8]}, {"max_tokens", kMaxTokens}, {"temperature", 0},
                   {"ignore_eos", true}, {"stream", true}};
      streams.push_back(std::make_shared<Stream>(ioc, body));
      streams.back()->run(server.port());
    }
    ioc.run();
    int failures = 0;
    for (int i = 0; i < count; ++i) {
      const auto& s = *streams[i];
      if (!s.error.empty() || s.tokens != expected[i % 8]) {
        if (++failures <= 5) ADD_FAILURE() << "stream " << i << ": " << s.error << " (" << s.tokens.size() << " tokens)";
      }
    }
    return failures;
  };
  EXPECT_EQ(run_round(300), 0);  // warm-up: the engine's buffers reach their high-water mark
  const size_t idle = testing::resident_bytes();
  EXPECT_EQ(run_round(1200), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.draining() == false && engine->in_flight() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const size_t after = testing::resident_bytes();
  std::printf("resident memory: %.1f MiB after warm-up, %.1f MiB after 1200 streams\n", idle / 1048576.0,
              after / 1048576.0);
  EXPECT_LT(after, idle + (idle / 10) + (16u << 20));
  EXPECT_EQ(engine->metrics().kv_blocks_in_use, 0);
  EXPECT_EQ(engine->metrics().finished.at(FinishReason::length), 1500u);
  server.shutdown();
}

}  // namespace
}  // namespace moeserve
