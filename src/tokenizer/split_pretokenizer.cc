#include "tokenizer/split_pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/pretokenizer.h"
#include "util/error.h"

namespace moeserve {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

// Match data for the whole match only (a pattern's groups are not needed: pcre2_match then returns 0 and still
// sets the whole match), one per thread: a tokenizer is shared between threads.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  MOESERVE_CHECK(holder.data != nullptr, "Split pre-tokenizer: out of memory for match data");
  return holder.data;
}

}  // namespace

SplitPretokenizer::SplitPretokenizer(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {
  MOESERVE_CHECK(!patterns_.empty(), "a Split pre-tokenizer sequence needs at least one pattern");
  try {
    for (size_t i = 0; i < patterns_.size(); ++i) {
      const std::string translated = translate_whitespace_classes(patterns_[i]);
      int error = 0;
      PCRE2_SIZE error_offset = 0;
      pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &error_offset, nullptr);
      MOESERVE_CHECK(code != nullptr, "Split pre-tokenizer {}: the pattern does not compile at offset {}: {}", i,
                     error_offset, pcre2_message(error));
      codes_.push_back(code);
      const int jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
      MOESERVE_CHECK(jit == 0, "Split pre-tokenizer {}: PCRE2 JIT compilation failed: {}", i, pcre2_message(jit));
    }
  } catch (...) {
    free_codes();
    throw;
  }
}

SplitPretokenizer::~SplitPretokenizer() { free_codes(); }

void SplitPretokenizer::free_codes() {
  for (void* code : codes_) pcre2_code_free(static_cast<pcre2_code*>(code));
  codes_.clear();
}

bool SplitPretokenizer::find(size_t step, std::string_view text, size_t from, size_t& start, size_t& end) const {
  pcre2_match_data* data = thread_match_data();
  auto* code = static_cast<pcre2_code*>(codes_[step]);
  // PCRE2_NOTEMPTY: an empty match cuts nothing and would not advance (DeepSeek's patterns have none).
  const int rc = pcre2_jit_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from, PCRE2_NOTEMPTY,
                                 data, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  MOESERVE_CHECK(rc >= 0, "Split pre-tokenizer {}: matching failed at byte {}: {}", step, from, pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
  start = ovector[0];
  end = ovector[1];
  return true;
}

}  // namespace moeserve
