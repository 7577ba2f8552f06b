// What the server tests share: the tokenizer, the tiny model, an in-process server over an engine, OpenAI error
// checks, and `moeserve serve` run as a process.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
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

// A program run as a child process in a process group of its own, its stdout and stderr in a log file. Killed
// with its group (SIGKILL) at destruction if it is still running.
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& argv, const std::string& log_path);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  std::string log() const;
  bool running();  // false once it has exited
  // Sends `signal` and waits at most `timeout` for the exit: the status as waitpid reports it, or none.
  std::optional<int> signal_and_wait(int signal, std::chrono::milliseconds timeout = std::chrono::seconds(120));

 private:
  pid_t pid_ = -1;
  std::string log_path_;
  std::optional<int> status_;
};

// `moeserve serve` as a child process; the port is read from its start-up line.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& arguments);

  pid_t pid() const { return process_.pid(); }
  uint16_t port() const { return port_; }  // 0: it did not start or did not become ready
  std::string log() const { return process_.log(); }
  // Sends `signal` and waits for the exit; the exit status as waitpid reports it (-1: still running after the
  // default wait of ChildProcess::signal_and_wait).
  int terminate_and_wait(int signal = SIGTERM);

 private:
  ChildProcess process_;
  uint16_t port_ = 0;
};

}  // namespace moeserve::testing
