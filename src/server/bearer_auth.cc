#include "server/bearer_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>

namespace moeserve::server {

namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

Digest sha256(std::string_view bytes) {
  Digest digest;
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), digest.data());
  return digest;
}

bool iequals_ascii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if ((a[i] | 0x20) != (b[i] | 0x20)) return false;
  return true;
}

}  // namespace

bool bearer_token_matches(std::string_view authorization, std::string_view api_key) {
  // RFC 9110 §11.4: credentials = auth-scheme [ 1*SP ( token68 / #auth-param ) ].
  const size_t space = authorization.find_first_of(" \t");
  if (space == std::string_view::npos || !iequals_ascii(authorization.substr(0, space), "bearer")) return false;
  const size_t token = authorization.find_first_not_of(" \t", space);
  if (token == std::string_view::npos) return false;
  const Digest presented = sha256(authorization.substr(token));
  const Digest expected = sha256(api_key);
  return CRYPTO_memcmp(presented.data(), expected.data(), presented.size()) == 0;
}

}  // namespace moeserve::server
