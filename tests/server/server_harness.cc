#include "server/server_harness.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "runner/cpu/cpu_runner.h"
#include "test_util.h"

namespace moeserve::testing {

using nlohmann::json;

std::shared_ptr<const Tokenizer> tokenizer() {
  static std::shared_ptr<const Tokenizer> t = Tokenizer::o200k_harmony();
  return t;
}

std::shared_ptr<const Checkpoint> tiny_checkpoint() {
  static auto c = std::shared_ptr<const Checkpoint>(Checkpoint::open(tiny_model()));
  return c;
}

std::shared_ptr<ModelRunner> tiny_runner() { return std::make_shared<CpuRunner>(tiny_checkpoint(), 2); }

std::vector<int32_t> encode(const std::string& text) { return tokenizer()->encode(text, AllowedSpecial::all()); }

std::vector<int32_t> harmony_reply(const std::vector<int32_t>& prompt) {
  const std::string text = tokenizer()->decode(prompt);
  if (text.find("functions.get_weather to=assistant") != std::string::npos)
    return encode("<|channel|>final<|message|>It is sunny in Paris.<|return|>");
  if (text.find("namespace functions") != std::string::npos)
    return encode("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                  "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>");
  // Structured outputs (text.format): an answer of its schema, and one that is not JSON, which the grammar stops.
  if (text.find("Weather as JSON") != std::string::npos)
    return encode("<|channel|>analysis<|message|>Sunny there.<|end|><|start|>assistant<|channel|>final<|message|>"
                  "{\"city\":\"Paris\",\"sunny\":true}<|return|>");
  if (text.find("Weather as YAML") != std::string::npos)
    return encode("<|channel|>final<|message|>city: Paris<|return|>");
  if (text.find("Hello! How can I help?") != std::string::npos)
    return encode("<|channel|>final<|message|>As I said: hello.<|return|>");
  return encode("<|channel|>analysis<|message|>The user greets me.<|end|><|start|>assistant<|channel|>final"
                "<|message|>Hello! How can I help?<|return|>");
}

ServerHarness::ServerHarness(std::shared_ptr<ModelRunner> runner, server::ServerOptions options, EngineConfig config)
    : ServerHarness(std::move(runner), testing::tokenizer(), std::move(options), std::move(config)) {}

ServerHarness::ServerHarness(std::shared_ptr<ModelRunner> runner, std::shared_ptr<const Tokenizer> tokenizer,
                             server::ServerOptions options, EngineConfig config) {
  if (config.num_kv_blocks == 0 && config.kv_cache_bytes == 0) config.num_kv_blocks = 4096;
  engine = std::make_shared<Engine>(std::move(runner), config);
  options.http.port = 0;
  options.served_model_name = "tiny";
  server = std::make_unique<server::OpenAiServer>(engine, std::move(tokenizer), options);
  server->start();
  port = server->port();
}

void expect_error(const HttpResult& r, unsigned status, const std::string& fragment, const std::string& param) {
  EXPECT_EQ(r.status, status) << r.body;
  json body = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(body.is_object() && body.contains("error")) << r.body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find(fragment), std::string::npos) << r.body;
  EXPECT_TRUE(body["error"].contains("type"));
  if (!param.empty()) {
    EXPECT_EQ(body["error"]["param"], param) << r.body;
  }
}

ChildProcess::ChildProcess(const std::vector<std::string>& argv, const std::string& log_path) : log_path_(log_path) {
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that crashes leaves no server behind
    if (freopen(log_path_.c_str(), "w", stderr) == nullptr || dup2(fileno(stderr), STDOUT_FILENO) < 0) _exit(126);
    std::vector<std::string> copy = argv;
    std::vector<char*> args;
    for (auto& arg : copy) args.push_back(arg.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && running()) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string ChildProcess::log() const {
  std::ifstream in(log_path_);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool ChildProcess::running() {
  int status = 0;
  if (!status_ && waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  return !status_;
}

std::optional<int> ChildProcess::signal_and_wait(int signal, std::chrono::milliseconds timeout) {
  if (!running()) return status_;
  kill(pid_, signal);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return status_;
}

ServeProcess::ServeProcess(const std::vector<std::string>& arguments)
    : process_([&] {
        std::vector<std::string> argv = {MOESERVE_BINARY, "serve", "--port", "0"};
        argv.insert(argv.end(), arguments.begin(), arguments.end());
        return argv;
      }(), temp_dir("serve") + "/serve.log") {
  for (int i = 0; i < 1200 && port_ == 0 && process_.running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string text = log();
    const auto at = text.find("on http://127.0.0.1:");
    if (at != std::string::npos) port_ = static_cast<uint16_t>(std::stoi(text.substr(at + 20)));
  }
  // The port is bound before the model loads: ready once /health answers 200.
  for (int i = 0; i < 1200 && port_ != 0 && process_.running(); ++i) {
    if (http_request(port_, "GET", "/health").status == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  port_ = 0;
}

int ServeProcess::terminate_and_wait(int signal) { return process_.signal_and_wait(signal).value_or(-1); }

}  // namespace moeserve::testing
