// A fake OpenAI / SGLang streaming server for the HTTP client's tests: it answers every completion request with a
// known token sequence, one token per event, after controlled delays, over chunked transfer encoding, and records
// the request bodies it received. It serves only its API's routes (404 elsewhere, as a real server of the other
// kind would answer), can require an API key, and can fail chosen requests.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/driver.h"
#include "bench/stream_protocol.h"
#include "bench/sut_http.h"

namespace moeserve::bench::testing {

struct FakeServerOptions {
  HttpApi api = HttpApi::openai;
  std::chrono::milliseconds first_token_delay{0};  // from the request to the first event
  std::chrono::milliseconds token_interval{0};     // between later events
  bool send_token_ids = true;                      // openai: "token_ids" in each chunk (vLLM's return_token_ids)
  bool send_usage = true;                          // openai: a final usage chunk
  bool sglang_cumulative_ids = true;               // sglang: output_ids holds every id so far (else only the new one)
  int status = 200;  // answer every completion with this status (an error body when not 200)
  // Completions whose prompt starts with one of these tokens get a 500; so do all after the first
  // `fail_after_requests` (0: none), as a server that dies during a run.
  std::set<int32_t> failing_first_tokens;
  int fail_after_requests = 0;
  // Not empty: every request without "Authorization: Bearer <api_key>" gets a 401, as `vllm serve --api-key`.
  std::string api_key;
  // Not empty: every completion streams these tokens (up to max_tokens) instead of tokens_for's.
  std::vector<int32_t> reply;
};

class FakeStreamingServer {
 public:
  explicit FakeStreamingServer(FakeServerOptions options);
  ~FakeStreamingServer();

  std::string url() const;
  // The tokens it streams for a prompt: min(max_tokens, 4 + prompt[0] % 5) ids derived from the prompt.
  static std::vector<int32_t> tokens_for(const std::vector<int32_t>& prompt, int max_tokens);
  std::vector<nlohmann::json> requests() const;
  // Connections accepted so far (keep-alive reuse keeps this below the request count).
  int connections() const { return connections_.load(); }

 private:
  struct State;
  void serve(int socket_fd);

  FakeServerOptions options_;
  std::shared_ptr<State> state_;
  std::atomic<int> connections_{0};
};

// A dataset whose prompt i is {i, 7, 7}, so that the fake server's answer identifies it.
Dataset numbered_dataset(int n);

// A run of `config` over numbered_dataset(samples) against a fresh fake server with `server_options` (the client
// speaks the server's API, with `client` for the rest: its endpoint and api are set here). What the server
// received is returned through the optional pointers.
RunResult run_against(const FakeServerOptions& server_options, const BenchConfig& config, int samples,
                      std::vector<nlohmann::json>* requests = nullptr, int* connections = nullptr,
                      HttpSutOptions client = {});

}  // namespace moeserve::bench::testing
