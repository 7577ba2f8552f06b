// Request parameters that OpenAI's API (or vLLM's extensions to it) defines but this server does not implement.
// Ignoring them would answer 200 with a different meaning than asked, so each is a 400 naming it, as OpenAI and
// vLLM answer parameters they recognise but cannot honour; null, or the parameter's neutral value (the one that
// asks for nothing: presence_penalty 0, logit_bias {}, best_of 1, store false, response_format {"type": "text"}),
// is accepted.
#pragma once

#include "server/request_fields.h"

namespace moeserve::server {

enum class Endpoint { chat, completions, responses };

// Throws the 400 for the first unsupported parameter of the body that asks for something.
void reject_unsupported_parameters(const Field& body, Endpoint endpoint);

}  // namespace moeserve::server
