// OpenAI chat messages as a DeepSeek-R1 conversation (chat/r1_chat.h), as servers of R1 map them: system and
// developer messages are the template's system prompt, user and assistant messages its turns (an assistant
// message's reasoning_content is dropped, as the template drops earlier reasoning). Tools, tool results and
// reasoning_effort are refused with 400: R1's tool format and effort levels are not supported.
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "chat/r1_chat.h"

namespace moeserve::server {

std::vector<chat::ChatTurn> r1_chat_turns(const nlohmann::json& body);

}  // namespace moeserve::server
