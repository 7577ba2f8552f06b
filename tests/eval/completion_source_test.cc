// The HTTP completion source against the bench's fake streaming server: prompts go out as the Harmony rendering's
// token ids, replies come back as token ids and are decoded here; a server without token ids is reported.
#include "eval/completion_source.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "bench/fake_server.h"
#include "eval/prompts.h"
#include "harmony/render.h"

namespace moeserve::eval {
namespace {

using bench::testing::FakeServerOptions;
using bench::testing::FakeStreamingServer;

std::vector<CompletionRequest> two_requests() {
  EvalQuestion q;
  q.kind = ScorerKind::aime;
  q.question = "What is 1 + 1?";
  CompletionRequest r;
  r.conversation = question_conversation(q, harmony::ReasoningEffort::low);
  r.max_tokens = 16;
  return {r, r};
}

TEST(HttpCompletionSource, SendsRenderedPromptsAndReadsTokenIds) {
  FakeStreamingServer server(FakeServerOptions{});
  const std::shared_ptr<const Tokenizer> tokenizer = Tokenizer::o200k_harmony();
  HttpCompletionSource source({server.url(), bench::HttpApi::openai, "tiny"}, tokenizer);
  EXPECT_THAT(source.describe(), ::testing::HasSubstr("OpenAI API"));
  const std::vector<CompletionRequest> requests = two_requests();
  bench::WorkProgress progress("test", requests.size());
  const std::vector<Completion> completions = source.complete(requests, &progress);
  ASSERT_EQ(completions.size(), 2u);
  // Both counted as they finished; the generations succeeded (decoding, which fails below, comes after).
  EXPECT_EQ(progress.done(), 2u);
  EXPECT_THAT(progress.status(), ::testing::HasSubstr("test: 2/2 done, 0 failed"));
  const std::vector<TokenId> prompt = harmony::render_conversation_for_completion(*tokenizer, requests[0].conversation);
  ASSERT_EQ(server.requests().size(), 2u);
  EXPECT_EQ(server.requests()[0]["prompt"].get<std::vector<int32_t>>(), prompt);
  const auto expected = FakeStreamingServer::tokens_for(prompt, 16);
  for (const Completion& c : completions) {
    EXPECT_EQ(c.tokens, static_cast<int64_t>(expected.size()));
    // The fake server's ids lie outside o200k_harmony: the reply cannot be decoded, and the sample says so.
    EXPECT_THAT(c.error, ::testing::HasSubstr("cannot be decoded"));
  }
}

TEST(HttpCompletionSource, ServersWithoutTokenIdsCannotBeScored) {
  FakeServerOptions options;
  options.send_token_ids = false;
  FakeStreamingServer server(options);
  HttpCompletionSource source({server.url(), bench::HttpApi::openai, "tiny"}, Tokenizer::o200k_harmony());
  for (const Completion& c : source.complete(two_requests(), nullptr)) {
    EXPECT_EQ(c.error, "the server returned text without token ids");
  }
}

}  // namespace
}  // namespace moeserve::eval
