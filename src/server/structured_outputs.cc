#include "server/structured_outputs.h"

#include <fmt/format.h>

#include "util/error.h"

namespace moeserve::server {

namespace {

// `format` with its schema where json_schema keeps it: the object holding name, schema and strict.
std::shared_ptr<const structured::TokenGrammar> grammar_of(const Field& format, const char* schema_holder,
                                                           structured::GrammarCache* grammars) {
  if (!format.present()) return nullptr;
  const std::string type = format["type"].string();
  if (type == "text") return nullptr;
  if (type != "json_object" && type != "json_schema")
    format["type"].fail("must be 'text', 'json_object' or 'json_schema'");
  if (grammars == nullptr) format.fail("is not supported by this server (no constrained decoding)");
  if (type == "json_object") return grammars->json_object();
  const Field schema = *schema_holder ? format[schema_holder]["schema"] : format["schema"];
  if (!schema.is_object()) schema.fail("must be a JSON schema object");
  try {
    return grammars->json_schema(schema.json());
  } catch (const Error& e) {
    schema.fail(fmt::format("cannot be used for constrained decoding: {}", e.what()));
  }
}

}  // namespace

std::shared_ptr<const structured::TokenGrammar> response_format_grammar(const Field& body,
                                                                        structured::GrammarCache* grammars) {
  return grammar_of(body["response_format"], "json_schema", grammars);
}

std::shared_ptr<const structured::TokenGrammar> text_format_grammar(const Field& body,
                                                                    structured::GrammarCache* grammars) {
  return grammar_of(body["text"]["format"], "", grammars);
}

std::shared_ptr<const structured::TokenVocabulary> vocabulary_of(const Tokenizer& tokenizer, int32_t vocab_size) {
  std::vector<std::string> bytes(vocab_size);
  std::vector<bool> special(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) {
    special[id] = tokenizer.is_special(id);
    if (!special[id]) bytes[id] = std::string(tokenizer.token_bytes(id));
  }
  return std::make_shared<const structured::TokenVocabulary>(std::move(bytes), std::move(special));
}

}  // namespace moeserve::server
