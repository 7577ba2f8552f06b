#include "tokenizer/o200k.h"

#include <fmt/format.h>

namespace moeserve::o200k {

std::string special_token_name(TokenId id) {
  switch (id) {
    case kStartOfText: return "<|startoftext|>";
    case kEndOfText: return "<|endoftext|>";
    case kReturn: return "<|return|>";
    case kConstrain: return "<|constrain|>";
    case kChannel: return "<|channel|>";
    case kStart: return "<|start|>";
    case kEnd: return "<|end|>";
    case kMessage: return "<|message|>";
    case kCall: return "<|call|>";
    default: return fmt::format("<|reserved_{}|>", id);
  }
}

}  // namespace moeserve::o200k
