// The API key check behind --api-key: "Authorization: Bearer <key>" (RFC 6750 §2.1). The scheme is matched without
// regard to case, as RFC 9110 §11.1 says of every auth-scheme ("bearer" and "BEARER" are "Bearer"), and the key is
// compared in constant time: the SHA-256 digests of the presented and the expected key are compared in full with
// OpenSSL's CRYPTO_memcmp, so the time taken says nothing about how many leading bytes matched, nor, the digests
// being of one length, about the key's length.
#pragma once

#include <string_view>

namespace moeserve::server {

// Whether an Authorization header value carries `api_key` as a bearer token.
bool bearer_token_matches(std::string_view authorization, std::string_view api_key);

}  // namespace moeserve::server
