#include "fake_server.h"

#include <fmt/format.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace moeserve::bench::testing {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

struct FakeStreamingServer::State {
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::thread accept_thread;
  std::mutex mutex;
  std::vector<std::shared_ptr<tcp::socket>> sockets;
  std::vector<std::thread> workers;
  std::vector<nlohmann::json> requests;
  std::atomic<bool> stopping{false};
};

namespace {

void write_chunk(tcp::socket& socket, const std::string& data) {
  const std::string chunk = fmt::format("{:x}\r\n{}\r\n", data.size(), data);
  net::write(socket, net::buffer(chunk));
}

std::string event(const nlohmann::json& j) { return "data: " + j.dump() + "\n\n"; }

}  // namespace

std::vector<int32_t> FakeStreamingServer::tokens_for(const std::vector<int32_t>& prompt, int max_tokens) {
  const int first = prompt.empty() ? 0 : prompt[0];
  const int n = std::min(max_tokens, 4 + first % 5);
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back(1000 + first * 10 + i);
  return tokens;
}

FakeStreamingServer::FakeStreamingServer(FakeServerOptions options)
    : options_(options), state_(std::make_shared<State>()) {
  tcp::endpoint endpoint(net::ip::make_address("127.0.0.1"), 0);
  state_->acceptor.open(endpoint.protocol());
  state_->acceptor.set_option(net::socket_base::reuse_address(true));
  state_->acceptor.bind(endpoint);
  state_->acceptor.listen();
  state_->accept_thread = std::thread([this] {
    while (!state_->stopping) {
      auto socket = std::make_shared<tcp::socket>(state_->ioc);
      beast::error_code ec;
      state_->acceptor.accept(*socket, ec);
      if (ec || state_->stopping) break;
      ++connections_;
      std::lock_guard lock(state_->mutex);
      state_->sockets.push_back(socket);
      state_->workers.emplace_back([this, socket] {
        try {
          serve(static_cast<int>(socket->native_handle()));
        } catch (const std::exception&) {
          // The client closed the connection (or the server is stopping).
        }
      });
    }
  });
}

FakeStreamingServer::~FakeStreamingServer() {
  state_->stopping = true;
  beast::error_code ec;
  {
    // A blocking accept() does not return when the acceptor is closed from another thread: connect to wake it.
    tcp::socket wake(state_->ioc);
    wake.connect(state_->acceptor.local_endpoint(), ec);
    state_->accept_thread.join();
  }
  state_->acceptor.close(ec);
  std::lock_guard lock(state_->mutex);
  for (auto& s : state_->sockets) s->shutdown(tcp::socket::shutdown_both, ec);
  for (auto& w : state_->workers) w.join();
}

std::string FakeStreamingServer::url() const {
  return fmt::format("http://127.0.0.1:{}", state_->acceptor.local_endpoint().port());
}

std::vector<nlohmann::json> FakeStreamingServer::requests() const {
  std::lock_guard lock(state_->mutex);
  return state_->requests;
}

void FakeStreamingServer::serve(int socket_fd) {
  std::shared_ptr<tcp::socket> socket;
  {
    std::lock_guard lock(state_->mutex);
    for (auto& s : state_->sockets)
      if (static_cast<int>(s->native_handle()) == socket_fd) socket = s;
  }
  const bool openai = options_.api == HttpApi::openai;
  auto answer = [&](int status, const std::string& body) {
    http::response<http::string_body> response(static_cast<http::status>(status), 11);
    response.set(http::field::content_type, "application/json");
    response.body() = body;
    response.prepare_payload();
    http::write(*socket, response);
  };
  beast::flat_buffer buffer;
  while (!state_->stopping) {
    http::request<http::string_body> request;
    http::read(*socket, buffer, request);  // throws when the client closes
    if (!options_.api_key.empty() && request[http::field::authorization] != "Bearer " + options_.api_key) {
      answer(401, R"({"error": "Unauthorized"})");
      continue;
    }
    const bool get = request.method() == http::verb::get;
    if (request.target() != (openai ? (get ? "/v1/models" : "/v1/completions") : (get ? "/get_model_info" : "/generate"))) {
      answer(404, R"({"detail": "Not Found"})");
      continue;
    }
    if (get) {
      answer(200, openai ? R"({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})"
                         : R"({"model_path": "fake-model"})");
      continue;
    }
    const nlohmann::json body = nlohmann::json::parse(request.body());
    size_t received = 0;
    {
      std::lock_guard lock(state_->mutex);
      state_->requests.push_back(body);
      received = state_->requests.size();
    }
    const std::vector<int32_t> prompt = body.at(openai ? "prompt" : "input_ids").get<std::vector<int32_t>>();
    const bool fails = options_.status != 200 || options_.failing_first_tokens.contains(prompt.at(0)) ||
                       (options_.fail_after_requests > 0 && received > static_cast<size_t>(options_.fail_after_requests));
    if (fails) {
      answer(options_.status != 200 ? options_.status : 500, R"({"error": {"message": "fake failure"}})");
      continue;
    }
    const int max_tokens =
        openai ? body.at("max_tokens").get<int>() : body.at("sampling_params").at("max_new_tokens").get<int>();
    std::vector<int32_t> tokens = options_.reply.empty() ? tokens_for(prompt, max_tokens) : options_.reply;
    if (static_cast<int>(tokens.size()) > max_tokens) tokens.resize(static_cast<size_t>(max_tokens));
    net::write(*socket, net::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                                "Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")));
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::this_thread::sleep_for(i == 0 ? options_.first_token_delay : options_.token_interval);
      const bool last = i + 1 == tokens.size();
      const std::string finish = last ? (static_cast<int>(tokens.size()) == max_tokens ? "length" : "stop") : "";
      nlohmann::json chunk;
      if (openai) {
        nlohmann::json choice = {{"index", 0},
                                 {"text", fmt::format("<{}>", tokens[i])},
                                 {"finish_reason", last ? nlohmann::json(finish) : nlohmann::json(nullptr)}};
        if (options_.send_token_ids) choice["token_ids"] = {tokens[i]};
        chunk = {{"id", "cmpl-fake"}, {"object", "text_completion"}, {"choices", {choice}}};
      } else {
        std::vector<int32_t> ids = options_.sglang_cumulative_ids
                                       ? std::vector<int32_t>(tokens.begin(), tokens.begin() + static_cast<long>(i) + 1)
                                       : std::vector<int32_t>{tokens[i]};
        chunk = {{"text", fmt::format("<{}>", tokens[i])},
                 {"output_ids", ids},
                 {"meta_info",
                  {{"completion_tokens", i + 1},
                   {"finish_reason", last ? nlohmann::json({{"type", finish}}) : nlohmann::json(nullptr)}}}};
      }
      write_chunk(*socket, event(chunk));
    }
    if (openai && options_.send_usage)
      write_chunk(*socket,
                  event({{"choices", nlohmann::json::array()},
                         {"usage", {{"prompt_tokens", prompt.size()}, {"completion_tokens", tokens.size()}}}}));
    write_chunk(*socket, "data: [DONE]\n\n");
    net::write(*socket, net::buffer(std::string("0\r\n\r\n")));
  }
}

Dataset numbered_dataset(int n) {
  Dataset d;
  d.format = "test";
  d.path = "numbered";
  for (int i = 0; i < n; ++i) d.samples.push_back({{i, 7, 7}, 0, "", ""});
  return d;
}

RunResult run_against(const FakeServerOptions& server_options, const BenchConfig& config, int samples,
                      std::vector<nlohmann::json>* requests, int* connections, HttpSutOptions client) {
  FakeStreamingServer server(server_options);
  client.endpoint = server.url();
  client.api = server_options.api;
  HttpSut sut(client);
  RunResult result = run_benchmark(sut, numbered_dataset(samples), config);
  if (requests) *requests = server.requests();
  if (connections) *connections = server.connections();
  return result;
}

}  // namespace moeserve::bench::testing
