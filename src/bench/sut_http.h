// A system under test behind HTTP: `moeserve serve` or any vLLM, SGLang or TensorRT-LLM server, through the
// OpenAI /v1/completions API or SGLang's native /generate (stream_protocol.h says what is sent and how the
// stream is read). The client is asynchronous (Boost.Asio/Beast): every sample is one streamed request on its own
// connection (idle keep-alive connections are reused), all driven by a few I/O threads, so thousands of samples
// can be in flight at once. Times are taken when the bytes of an event are read from the socket.
#pragma once

#include <memory>
#include <string>

#include "bench/stream_protocol.h"
#include "bench/sut.h"

namespace moeserve::bench {

struct HttpSutOptions {
  std::string endpoint;  // http://host:port[/prefix]
  HttpApi api = HttpApi::openai;
  // The OpenAI "model" field; empty asks the server's /v1/models and takes its first model.
  std::string model;
  // Sent as "Authorization: Bearer KEY" on every request (empty: no header), as OpenAI's clients do.
  std::string api_key{};
  int io_threads = 1;
  double connect_timeout_seconds = 30;
};

// The key to send: `given` (--api-key), else the OPENAI_API_KEY environment variable, as OpenAI's clients read it.
std::string resolve_api_key(const std::string& given);

class HttpSut : public SystemUnderTest {
 public:
  explicit HttpSut(HttpSutOptions options);
  ~HttpSut() override;

  std::string name() const override;
  nlohmann::json describe() const override;
  void start(SampleObserver& observer) override;
  void issue(std::span<const SampleRequest> samples) override;
  void cancel_all() override;
  void stop() override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace moeserve::bench
