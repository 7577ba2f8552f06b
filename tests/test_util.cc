#include "test_util.h"

#include "tokenizer/o200k.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_files.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <sys/wait.h>
#include <vector>

namespace moeserve::testing {
namespace {

struct TempDirs {
  std::mutex mutex;
  std::vector<std::string> dirs;
  ~TempDirs() {
    for (const auto& d : dirs) std::filesystem::remove_all(d);
  }
};
TempDirs& temp_dirs() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

std::string temp_dir(const std::string& label) {
  std::string pattern = (std::filesystem::temp_directory_path() / ("moeserve-" + label + "-XXXXXX")).string();
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  const char* made = ::mkdtemp(buffer.data());
  if (made == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  std::lock_guard lock(temp_dirs().mutex);
  temp_dirs().dirs.push_back(made);
  return made;
}

std::string tiny_model(const TinyModelOptions& o) {
  static std::mutex mutex;
  static std::map<std::string, std::string> made;
  std::string key = fmt::format("{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}-{}", o.seed, o.layers, o.hidden, o.heads,
                                o.kv_heads, o.head_dim, o.experts, o.top_k, o.intermediate, o.vocab, o.window,
                                static_cast<int>(o.layout), static_cast<int>(o.expert_format), o.shards, o.shape);
  std::lock_guard lock(mutex);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  std::string dir = temp_dir("tiny");
  make_tiny_checkpoint(o, dir);
  // Beside the weights, the tokenizer (as `moeserve make-tiny` writes it) when the vocabulary is the real one.
  if (tiny_model_config(o).vocab_size == o200k::kVocabularySize) write_tokenizer_files(*Tokenizer::o200k_harmony(), dir);
  made[key] = dir;
  return dir;
}

CommandResult run_command(const std::string& command_line) {
  CommandResult result;
  FILE* pipe = ::popen((command_line + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace moeserve::testing
