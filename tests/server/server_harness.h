// What the server tests share: the tokenizer, the tiny model, an in-process server over an engine, OpenAI error
// checks, and `moeserve serve` run as a process.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "model/gpt_oss/checkpoint.h"
#include "server/http_client.h"
#include "server/openai_server.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::testing {

std::shared_ptr<const Tokenizer> tokenizer();
std::shared_ptr<const Checkpoint> tiny_checkpoint();
std::shared_ptr<ModelRunner> tiny_runner();
std::vector<int32_t> encode(const std::string& text);
// Replies scripted in Harmony for a ScriptedRunner: analysis then final; with tools, analysis then a call to
// get_weather; after its result, a final answer; in a conversation that holds the first answer, another; asked
// for the weather as JSON, a JSON answer, and as YAML, a YAML one.
std::vector<int32_t> harmony_reply(const std::vector<int32_t>& prompt);

// A server named "tiny" on a free port over a fresh engine (4096 KV blocks unless the config says otherwise).
struct ServerHarness {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<server::OpenAiServer> server;
  uint16_t port = 0;

  explicit ServerHarness(std::shared_ptr<ModelRunner> runner, server::ServerOptions options = {},
                         EngineConfig config = {});
  // Another model's tokenizer (DeepSeek-R1's).
  ServerHarness(std::shared_ptr<ModelRunner> runner, std::shared_ptr<const Tokenizer> tokenizer,
                server::ServerOptions options = {}, EngineConfig config = {});
  ~ServerHarness() { server->shutdown(); }
};

// An OpenAI error body with this status whose message contains the fragment (and whose param is `param`, when
// given).
void expect_error(const HttpResult& r, unsigned status, const std::string& fragment, const std::string& param = {});

// `moeserve serve` as a child process with stderr in a log file; the port is read from its start-up line.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& arguments);
  ~ServeProcess();  // kills the process if it is still running

  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }  // 0: it did not start or did not become ready
  std::string log() const;
  // Sends SIGTERM and waits for the exit; the exit status as waitpid reports it.
  int terminate_and_wait();

 private:
  pid_t pid_ = -1;
  uint16_t port_ = 0;
  std::string log_path_;
  bool exited_ = false;
};

}  // namespace moeserve::testing
