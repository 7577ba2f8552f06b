// Structured outputs: chat's and completions' response_format ({"type": "json_object"}, or {"type": "json_schema",
// "json_schema": {"name", "schema", "strict"}}), or the Responses API's text.format (the same with name, schema and
// strict beside the type), as the grammar the engine constrains its tokens with (structured/token_mask.h),
// compiled once per schema through the server's GrammarCache.
#pragma once

#include <memory>

#include "server/request_fields.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"

namespace moeserve::server {

// The grammar response_format asks for; null for {"type": "text"} or none. A 400 naming the field for a schema
// constrained decoding does not support, or when the server has no grammar cache.
std::shared_ptr<const structured::TokenGrammar> response_format_grammar(const Field& body,
                                                                        structured::GrammarCache* grammars);
// The same for the Responses API's text.format.
std::shared_ptr<const structured::TokenGrammar> text_format_grammar(const Field& body,
                                                                    structured::GrammarCache* grammars);

// The tokenizer's vocabulary of vocab_size ids as the token mask reads it.
std::shared_ptr<const structured::TokenVocabulary> vocabulary_of(const Tokenizer& tokenizer, int32_t vocab_size);

}  // namespace moeserve::server
