// The API key check: the scheme in any case, the key exactly (compared through digests in constant time).
#include <gtest/gtest.h>

#include "server/bearer_auth.h"

namespace moeserve::server {
namespace {

TEST(BearerAuth, SchemeInAnyCaseKeyExactly) {
  for (const char* header : {"Bearer sekret", "bearer sekret", "BEARER sekret", "bEaReR   sekret", "Bearer\tsekret"})
    EXPECT_TRUE(bearer_token_matches(header, "sekret")) << header;
  for (const char* header : {"", "Bearer", "Bearer ", "Bearersekret", "Basic sekret", "Bearer Sekret", "Bearer sekre",
                             "Bearer sekret2", "Bearer xsekret", "Token sekret", "sekret"})
    EXPECT_FALSE(bearer_token_matches(header, "sekret")) << header;
  const std::string with_nul("Bearer se\0ret", 13);
  EXPECT_FALSE(bearer_token_matches(with_nul, "sekret"));
  EXPECT_TRUE(bearer_token_matches(with_nul, std::string_view("se\0ret", 6)));
}

}  // namespace
}  // namespace moeserve::server
