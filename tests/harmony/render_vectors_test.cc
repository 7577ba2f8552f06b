// Every rendering vector of openai/harmony (test-data @ec7606d), built from the same conversations as its
// src/tests.rs and tests/test_harmony.py: the decoded text must equal the vector, and the vector's text encoded
// with all special tokens allowed must equal our rendered ids.
#include <gtest/gtest.h>

#include "harmony/render.h"
#include "harmony_test_util.h"

namespace moeserve::harmony {
namespace {

using testing::tokenizer;
using testing::vector_text;
using nlohmann::ordered_json;

const char* const kIdentity = "You are ChatGPT, a large language model trained by OpenAI.";

Message system(SystemContent content) { return Message{Role::system, {}, {}, {}, {}, std::move(content)}; }
Message developer(DeveloperContent content) { return Message{Role::developer, {}, {}, {}, {}, std::move(content)}; }

SystemContent system_content(ReasoningEffort effort, std::vector<std::string> channels = {}) {
  SystemContent s;
  s.model_identity = kIdentity;
  s.reasoning_effort = effort;
  if (!channels.empty()) s.channel_config = ChannelConfig{std::move(channels), true};
  return s;
}

SystemContent dated(std::string date) {
  SystemContent s;
  s.conversation_start_date = std::move(date);
  return s;
}

void expect_vector(const std::string& name, const std::vector<TokenId>& rendered) {
  const std::string expected = vector_text(name);
  EXPECT_EQ(tokenizer().decode_utf8(rendered), expected) << name;
  EXPECT_EQ(tokenizer().encode(expected, AllowedSpecial::all()), rendered) << name << ": token ids differ";
}

void expect_completion(const std::string& name, const Conversation& conversation, RenderOptions options = {}) {
  expect_vector(name, render_conversation_for_completion(tokenizer(), conversation, Role::assistant, options));
}

TEST(HarmonyRenderVectors, SimpleConvo) {
  expect_completion("test_simple_convo.txt",
                    {system(system_content(ReasoningEffort::medium)), Message::text(Role::user, "What is 2 + 2?")});
}

TEST(HarmonyRenderVectors, SimpleConvoWithEffort) {
  const std::string question = "What is the capital of the largest country in the world?";
  for (const auto& [effort, file] : std::vector<std::pair<ReasoningEffort, std::string>>{
           {ReasoningEffort::low, "low"}, {ReasoningEffort::medium, "medium"}, {ReasoningEffort::high, "high"}}) {
    DeveloperContent instructions;
    instructions.instructions = "Answer the user's questions like a robot.";
    expect_completion("test_simple_convo_" + file + "_effort.txt",
                      {system(system_content(effort)), developer(instructions), Message::text(Role::user, question)});
    expect_completion("test_simple_convo_" + file + "_effort_no_instruction.txt",
                      {system(system_content(effort)), Message::text(Role::user, question)});
  }
}

TEST(HarmonyRenderVectors, ReasoningSystemMessage) {
  expect_completion("test_reasoning_system_message.txt",
                    {system(system_content(ReasoningEffort::medium, {"analysis", "final"})),
                     Message::text(Role::user, "What is 2 + 2?")});
  expect_completion("test_reasoning_system_message_no_instruction.txt",
                    {system(system_content(ReasoningEffort::high, {"analysis", "final"})),
                     Message::text(Role::user, "What is the best place to eat candy in the world?")});
  SystemContent with_dates = system_content(ReasoningEffort::medium, {"analysis", "final"});
  with_dates.conversation_start_date = "2021-01-01";
  with_dates.knowledge_cutoff = "2021-01";
  expect_completion("test_reasoning_system_message_with_dates.txt",
                    {system(with_dates), Message::text(Role::user, "What is 42 * pi?")});
}

TEST(HarmonyRenderVectors, RenderFunctionsWithParameters) {
  SystemContent s = dated("2025-06-28");
  s.reasoning_effort = ReasoningEffort::high;
  DeveloperContent d;
  d.instructions = "Always respond in riddles";
  d.with_function_tools({
      {"get_location", "Gets the location of the user.", std::nullopt},
      {"get_current_weather", "Gets the current weather in the provided location.", ordered_json::parse(R"({
          "type": "object",
          "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
          },
          "required": ["location"]})")},
      {"get_multiple_weathers", "Gets the current weather in the provided list of locations.",
       ordered_json::parse(R"({
          "type": "object",
          "properties": {
            "locations": {"type": "array", "items": {"type": "string"},
                          "description": "List of city and state, e.g. [\"San Francisco, CA\", \"New York, NY\"]"},
            "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}
          },
          "required": ["locations"]})")},
      {"kitchensink", "A function with various complex schemas.", ordered_json::parse(R"({
          "description": "params object",
          "type": "object",
          "properties": {
            "string": {"type": "string", "title": "STRING", "description": "A string", "examples": ["hello", "world"]},
            "string_nullable": {"type": "string", "nullable": true, "description": "A nullable string",
                                "default": "the default"},
            "string_enum": {"type": "string", "enum": ["a", "b", "c"]},
            "oneof_string_or_number": {
              "oneOf": [{"type": "string", "default": "default_string_in_oneof"},
                        {"type": "number", "description": "numbers can happen too"}],
              "description": "a oneof",
              "default": 20
            }
          }})")},
  });
  expect_completion("test_render_functions_with_parameters.txt",
                    {system(s), developer(d), Message::text(Role::user, "What is the weather like in SF?")});
}

TEST(HarmonyRenderVectors, BuiltInTools) {
  expect_completion("test_no_tools.txt", {system(dated("2025-06-28"))});
  expect_completion("test_browser_tool_only.txt", {system(dated("2025-06-28").with_tools(ToolNamespace::browser()))});
  expect_completion(
      "test_browser_and_python_tool.txt",
      {system(dated("2025-06-28").with_tools(ToolNamespace::browser()).with_tools(ToolNamespace::python()))});
  DeveloperContent functions;
  functions.with_function_tools({{"lookup_weather",
                                  "Use this tool to lookup the weather in a given location. Call it with the parameter "
                                  "'location', can be any textual description of a location.",
                                  ordered_json::parse(R"({"type": "object", "properties": {"location":
                                      {"type": "string"}}, "required": ["location"]})")}});
  expect_completion("test_browser_and_function_tool.txt",
                    {system(dated("2025-06-28").with_tools(ToolNamespace::browser())), developer(functions)});
}

Conversation two_plus_two(const std::string& analysis) {
  return {Message::text(Role::user, "What is 2 + 2?"),
          Message::text(Role::assistant, analysis).with_channel("analysis"),
          Message::text(Role::assistant, "2 + 2 equals 4.").with_channel("final"),
          Message::text(Role::user, "What about 9 / 2?")};
}

TEST(HarmonyRenderVectors, DroppingAnalysis) {
  expect_completion("test_dropping_cot_by_default.txt",
                    two_plus_two("User asks: “What is 2 + 2?” Simple arithmetic. Provide answer."));
  expect_completion("test_preserve_cot.txt",
                    two_plus_two("User asks a simple question: \"What is 2 + 2?\" The answer: 4."),
                    RenderOptions{.auto_drop_analysis = false});
  expect_completion("test_does_not_drop_if_ongoing_analysis.txt",
                    {Message::text(Role::user, "What is the weather in SF?"),
                     Message::text(Role::assistant,
                                   "User asks: “What is the weather in SF?” We need to use lookup_weather tool.")
                         .with_channel("analysis"),
                     Message::text(Role::assistant, "{\"location\": \"San Francisco\"}")
                         .with_channel("commentary")
                         .with_recipient("functions.lookup_weather")
                         .with_content_type("<|constrain|>json"),
                     Message::from_tool("functions.lookup_weather",
                                        "{\"temperature\": 20, \"description\": \"sunny\"}")});
  expect_vector("test_keep_analysis_between_finals.txt",
                render_conversation(tokenizer(), {Message::text(Role::user, "What is 2 + 2?"),
                                                  Message::text(Role::assistant, "thinking 2+2").with_channel("analysis"),
                                                  Message::text(Role::assistant, "4").with_channel("final"),
                                                  Message::text(Role::user, "What is 3 + 5?"),
                                                  Message::text(Role::assistant, "thinking 3+5").with_channel("analysis"),
                                                  Message::text(Role::assistant, "8").with_channel("final")}));
}

}  // namespace
}  // namespace moeserve::harmony
