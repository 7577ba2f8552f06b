// OpenAI chat messages as a DeepSeek-R1 conversation (chat/r1_chat.h), as servers of R1 map them: system and
// developer messages are the template's system prompt, user and assistant messages its turns (an assistant
// message's reasoning_content is dropped, as the template drops earlier reasoning). Tools, tool results and
// reasoning_effort are refused with 400: R1's tool format and effort levels are not supported. Fields are read
// through request_fields.h and the request's limits (messages, text bytes) checked, as for Harmony.
#pragma once

#include <vector>

#include "chat/r1_chat.h"
#include "server/request_fields.h"

namespace moeserve::server {

std::vector<chat::ChatTurn> r1_chat_turns(const Field& body, const RequestLimits& limits);

}  // namespace moeserve::server
