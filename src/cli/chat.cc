// moeserve chat: a multi-turn conversation with a model on the CPU runner, in its chat format (Harmony for gpt-oss,
// DeepSeek-R1's template for the DeepSeek-V3 family). Each line of standard input is a user turn; the assistant's
// reasoning (analysis) and answer stream as they are generated, and the conversation (without earlier reasoning,
// as both formats drop it) is rendered again for the next turn.
#include <fmt/core.h>

#include <iostream>
#include <memory>

#include "chat/r1_chat.h"
#include "cli/commands.h"
#include "engine/generate.h"
#include "harmony/completion.h"
#include "harmony/parser.h"
#include "harmony/render.h"
#include "model/gpt_oss/checkpoint.h"
#include "runner/cpu/cpu_runner.h"
#include "runner/cpu/deepseek_v3_runner.h"
#include "util/error.h"

namespace moeserve::cli {
namespace {

// Prints the assistant's messages while their tokens arrive, each labelled with its channel.
class ReplyPrinter {
 public:
  ReplyPrinter(const Tokenizer& tokenizer, bool show_analysis)
      : parser_(tokenizer, harmony::Role::assistant), show_analysis_(show_analysis) {}

  void on_token(TokenId token) {
    if (broken_) return;
    const size_t completed = parser_.messages().size();
    try {
      parser_.process(token);
    } catch (const Error&) {
      broken_ = true;  // parse_assistant_reply reports it once generation ends
      end_line();
      return;
    }
    if (parser_.current() && !in_message_) {
      in_message_ = true;
      visible_ = show_analysis_ || parser_.current()->channel != "analysis";
      if (visible_) fmt::print("{}", label(*parser_.current()));
    }
    if (visible_) fmt::print("{}", parser_.last_content_delta());
    if (parser_.messages().size() > completed) end_line();
    std::fflush(stdout);
  }
  void end_line() {
    if (in_message_ && visible_) fmt::print("\n");
    in_message_ = false;
  }

 private:
  static std::string label(const harmony::Message& m) {
    if (m.channel == "final") return "assistant: ";
    std::string label = "[" + m.channel.value_or("no channel");
    if (m.recipient) label += " to=" + *m.recipient;
    return label + "] ";
  }

  harmony::StreamingParser parser_;
  bool show_analysis_;
  bool broken_ = false;
  bool in_message_ = false;
  bool visible_ = false;
};

// DeepSeek-R1's template: the reasoning in brackets (unless hidden), then the answer.
void chat_r1(const std::string& model, const GenerateOptions& base, size_t threads, bool show_reasoning) {
  const auto tokenizer = Tokenizer::from_model_dir(model);
  DeepseekV3CpuRunner runner(std::shared_ptr<const deepseek_v3::Checkpoint>(deepseek_v3::Checkpoint::open(model)),
                             threads);
  GenerateOptions options = base;
  options.stop_tokens = runner.config().eos_token_ids;
  std::vector<chat::ChatTurn> conversation;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    if (line == "/quit") break;
    conversation.push_back({chat::ChatTurn::Role::user, line});
    chat::R1ReplyStream stream(*tokenizer);
    bool reasoning_open = false, answer_open = false;
    auto print = [&](const chat::R1ReplyStream::Delta& d) {
      if (!d.reasoning.empty() && show_reasoning) {
        if (!reasoning_open) fmt::print("[reasoning] ");
        reasoning_open = true;
        fmt::print("{}", d.reasoning);
      }
      if (!d.content.empty()) {
        if (!answer_open) fmt::print("{}assistant: ", reasoning_open ? "\n" : "");
        answer_open = true;
        fmt::print("{}", d.content);
      }
      std::fflush(stdout);
    };
    std::string content;
    const GenerateResult result = generate_sequence(runner, chat::render_r1_prompt(*tokenizer, conversation), options,
                                                    [&](int32_t token) {
                                                      const auto d = stream.push(token);
                                                      content += d.content;
                                                      print(d);
                                                    });
    const auto last = stream.finish();
    content += last.content;
    print(last);
    if (reasoning_open || answer_open) fmt::print("\n");
    std::fflush(stdout);
    if (!stream.stopped())
      fmt::print(stderr, "moeserve: chat: the reply was cut at --max-tokens {}{}\n", options.max_tokens,
                 stream.in_reasoning() ? ", still reasoning" : "");
    conversation.push_back({chat::ChatTurn::Role::assistant, content});
  }
}

}  // namespace

void register_chat(CLI::App& app) {
  struct Args {
    std::string model;
    std::string reasoning = "medium";
    GenerateOptions options;
    size_t threads = 0;
    bool hide_analysis = false;
  };
  auto args = std::make_shared<Args>();
  args->options.max_tokens = 512;
  args->options.sampling.temperature = 1.0f;  // GPT-OSS's recommended sampling: temperature 1, top_p 1
  auto* cmd = app.add_subcommand("chat", "a multi-turn conversation in the model's chat format: one user turn per line of "
                                         "input");
  auto& o = args->options;
  cmd->add_option("--model", args->model, "model directory (weights and tokenizer.json)")->required();
  cmd->add_option("--reasoning", args->reasoning, "reasoning effort")
      ->check(CLI::IsMember({"low", "medium", "high"}))
      ->capture_default_str();
  cmd->add_option("--max-tokens", o.max_tokens, "tokens per reply at most")->capture_default_str();
  cmd->add_option("--temperature", o.sampling.temperature, "0 is greedy")->capture_default_str();
  cmd->add_option("--top-p", o.sampling.top_p)->capture_default_str();
  cmd->add_option("--seed", o.sampling.seed)->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0: all)")->capture_default_str();
  cmd->add_flag("--hide-analysis", args->hide_analysis, "print only final answers, not the chain of thought");
  cmd->callback([args, cmd] {
    if (model_family_of(args->model) == ModelFamily::deepseek_v3) {
      MOESERVE_CHECK(cmd->count("--reasoning") == 0,
                     "--reasoning is Harmony's reasoning effort; DeepSeek-R1 always reasons first");
      chat_r1(args->model, args->options, args->threads, !args->hide_analysis);
      return;
    }
    const auto tokenizer = Tokenizer::from_model_dir(args->model);
    auto checkpoint = std::shared_ptr<const Checkpoint>(Checkpoint::open(args->model));
    CpuRunner runner(checkpoint, args->threads);
    GenerateOptions options = args->options;
    options.stop_tokens = harmony::assistant_stop_tokens();
    harmony::Conversation conversation = {harmony::system_message(harmony::parse_reasoning_effort(args->reasoning))};
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      if (line == "/quit") break;
      conversation.push_back(harmony::Message::text(harmony::Role::user, line));
      const std::vector<TokenId> prompt = harmony::render_conversation_for_completion(*tokenizer, conversation);
      ReplyPrinter printer(*tokenizer, !args->hide_analysis);
      const GenerateResult result =
          generate_sequence(runner, prompt, options, [&](int32_t token) { printer.on_token(token); });
      printer.end_line();
      const harmony::AssistantReply reply = harmony::parse_assistant_reply(*tokenizer, result.tokens);
      if (reply.error) {
        fmt::print(stderr, "moeserve: chat: the reply is not well-formed Harmony ({}); its text: {}\n", *reply.error,
                   tokenizer->decode(result.tokens));
      } else if (!reply.stopped) {
        fmt::print(stderr, "moeserve: chat: the reply was cut at --max-tokens {}\n", options.max_tokens);
      }
      conversation.insert(conversation.end(), reply.messages.begin(), reply.messages.end());
    }
  });
}

}  // namespace moeserve::cli
