// UTF-8 and the Unicode classes the byte-level BPE pre-tokenizer needs (\p{L}, \p{N}, \s).
// Letter/number tables are generated from node's Unicode database
// (tools/corpus/gen_unicode_tables.mjs) so the C++ and JavaScript tokenizers agree; \s is the
// Unicode White_Space property, as in Oniguruma (HF tokenizers) and tiktoken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace strata {

struct CodePointRange {
  char32_t first, last;  // inclusive
};

namespace unicode_tables {
extern const CodePointRange kLetter[];
extern const std::size_t kLetterCount;
extern const CodePointRange kNumber[];
extern const std::size_t kNumberCount;
}  // namespace unicode_tables

namespace unicode {

enum class CharClass : std::uint8_t { kOther, kLetter, kNumber, kSpace };

CharClass char_class(char32_t cp);  // kOther for anything outside the three classes
bool is_white_space(char32_t cp);

inline constexpr char32_t kReplacement = 0xFFFD;

// One step of UTF-8 decoding at the start of `s` (non-empty). `len` bytes are consumed:
// kValid: one code point `cp`; kInvalid: a maximal invalid subpart (one U+FFFD when decoded
// lossily, Unicode's "substitution of maximal subparts", as Rust's from_utf8_lossy);
// kIncomplete: the whole rest of `s` is a valid but unfinished sequence.
struct Utf8Step {
  enum Kind : std::uint8_t { kValid, kInvalid, kIncomplete } kind;
  std::uint8_t len;
  char32_t cp;
};
Utf8Step utf8_step(std::string_view s);

void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);
// `bytes` as UTF-8 with each maximal invalid subpart (and a trailing unfinished sequence)
// replaced by U+FFFD.
std::string lossy_utf8(std::string_view bytes);

// Python's str.strip() on UTF-8 text (White_Space at both ends), as Jinja's `trim`.
std::string_view trim_white_space(std::string_view s);

}  // namespace unicode
}  // namespace strata
