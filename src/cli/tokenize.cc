// moeserve tokenize / detokenize: text <-> o200k_harmony token ids, as JSON arrays.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"
#include "util/error.h"
#include "util/files.h"

namespace moeserve::cli {
namespace {

struct TokenizerArgs {
  std::string model;
  std::string tokenizer_file;
  std::string text;
  std::string file;
  bool lines = false;
};

void add_common_options(CLI::App* cmd, TokenizerArgs& args, const char* text_help) {
  auto* model = cmd->add_option("--model", args.model, "model directory (its tokenizer.json or o200k_base.tiktoken)");
  auto* file = cmd->add_option("--tokenizer", args.tokenizer_file, "a tokenizer.json or .tiktoken file instead");
  model->excludes(file);
  auto* text = cmd->add_option("--text", args.text, text_help);
  cmd->add_option("--file", args.file, "read the input from this file (default: standard input)")->excludes(text);
  cmd->add_flag("--lines", args.lines, "one input per line (the newline excluded), one output per line");
}

std::unique_ptr<Tokenizer> open_tokenizer(const TokenizerArgs& args) {
  MOESERVE_CHECK(!args.model.empty() || !args.tokenizer_file.empty(), "give --model DIR or --tokenizer FILE");
  return args.model.empty() ? Tokenizer::from_file(args.tokenizer_file) : Tokenizer::from_model_dir(args.model);
}

std::string read_input(const TokenizerArgs& args, const CLI::App* cmd) {
  if (cmd->count("--text") > 0) return args.text;
  if (!args.file.empty()) return read_text_file(args.file);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Calls on_item(item, line_number) for the whole input, or for each line of it with --lines (a final newline
// does not start another line).
template <typename F>
void for_each_item(const std::string& input, bool lines, F&& on_item) {
  if (!lines) {
    on_item(input, 0);
    return;
  }
  size_t line = 1;
  for (size_t start = 0; start < input.size(); ++line) {
    size_t end = input.find('\n', start);
    if (end == std::string::npos) end = input.size();
    on_item(std::string_view(input).substr(start, end - start), line);
    start = end + 1;
  }
}

void with_line_context(size_t line, const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    if (line == 0) throw;
    fail("line {}: {}", line, e.what());
  }
}

}  // namespace

void register_tokenize(CLI::App& app) {
  struct Args : TokenizerArgs {
    bool allow_special = false;
    bool ordinary = false;
  };
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("tokenize", "print the token ids of text as a JSON array");
  add_common_options(cmd, *args, "the text to tokenize");
  auto* allow = cmd->add_flag("--allow-special", args->allow_special, "special-token text becomes special tokens");
  cmd->add_flag("--ordinary", args->ordinary, "special-token text is ordinary text (default: it is an error)")
      ->excludes(allow);
  cmd->callback([args, cmd] {
    const auto tokenizer = open_tokenizer(*args);
    const std::string input = read_input(*args, cmd);
    for_each_item(input, args->lines, [&](std::string_view text, size_t line) {
      with_line_context(line, [&] {
        const std::vector<TokenId> ids =
            args->ordinary ? tokenizer->encode_ordinary(text)
                           : tokenizer->encode(text, args->allow_special ? AllowedSpecial::all() : AllowedSpecial::none());
        fmt::print("[{}]\n", fmt::join(ids, ","));
      });
    });
  });
}

void register_detokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizerArgs>();
  auto* cmd = app.add_subcommand("detokenize", "print the text of token ids given as a JSON array");
  add_common_options(cmd, *args, "the JSON array of ids");
  cmd->callback([args, cmd] {
    const auto tokenizer = open_tokenizer(*args);
    const std::string input = read_input(*args, cmd);
    for_each_item(input, args->lines, [&](std::string_view text, size_t line) {
      with_line_context(line, [&] {
        nlohmann::json ids;
        try {
          ids = nlohmann::json::parse(text);
        } catch (const nlohmann::json::parse_error& e) {
          fail("not a JSON array of token ids: {}", e.what());
        }
        MOESERVE_CHECK(ids.is_array(), "not a JSON array of token ids: {}", ids.dump());
        std::vector<TokenId> tokens;
        for (const auto& id : ids) {
          MOESERVE_CHECK(id.is_number_integer(), "{} is not a token id", id.dump());
          const int64_t value = id.get<int64_t>();
          MOESERVE_CHECK(value >= 0 && value <= o200k::kLastSpecial, "token id {} is not in o200k_harmony (0..{})",
                         value, o200k::kLastSpecial);
          tokens.push_back(static_cast<TokenId>(value));
        }
        fmt::print("{}{}", tokenizer->decode(tokens), args->lines ? "\n" : "");
      });
    });
  });
}

}  // namespace moeserve::cli
