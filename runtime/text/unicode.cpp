#include "runtime/text/unicode.h"

#include <algorithm>
#include <array>
#include <map>
#include <vector>

namespace strata::unicode {
namespace {

// Two-stage lookup: 256-code-point blocks, identical blocks shared.
class ClassTable {
 public:
  ClassTable() {
    std::vector<std::uint8_t> flat(0x110000, static_cast<std::uint8_t>(CharClass::kOther));
    auto fill = [&](const CodePointRange* r, std::size_t n, CharClass c) {
      for (std::size_t i = 0; i < n; ++i)
        for (char32_t cp = r[i].first; cp <= r[i].last; ++cp)
          flat[cp] = static_cast<std::uint8_t>(c);
    };
    fill(unicode_tables::kLetter, unicode_tables::kLetterCount, CharClass::kLetter);
    fill(unicode_tables::kNumber, unicode_tables::kNumberCount, CharClass::kNumber);
    for (char32_t cp = 0; cp < 0x110000; ++cp)
      if (is_white_space(cp)) flat[cp] = static_cast<std::uint8_t>(CharClass::kSpace);
    std::map<std::string, std::uint16_t> seen;
    for (std::size_t b = 0; b < 0x1100; ++b) {
      std::string blk(reinterpret_cast<const char*>(flat.data()) + b * 256, 256);
      auto [it, added] = seen.emplace(std::move(blk), static_cast<std::uint16_t>(seen.size()));
      if (added) blocks_.insert(blocks_.end(), it->first.begin(), it->first.end());
      index_[b] = it->second;
    }
  }
  CharClass get(char32_t cp) const {
    if (cp >= 0x110000) return CharClass::kOther;
    return static_cast<CharClass>(blocks_[std::size_t{index_[cp >> 8]} * 256 + (cp & 0xFF)]);
  }

 private:
  std::array<std::uint16_t, 0x1100> index_{};
  std::vector<std::uint8_t> blocks_;
};

const ClassTable& table() {
  static const ClassTable t;
  return t;
}

}  // namespace

bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

CharClass char_class(char32_t cp) {
  return table().get(cp);
}

Utf8Step utf8_step(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return {Utf8Step::kValid, 1, b0};
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  char32_t cp;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2, cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3, cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {Utf8Step::kInvalid, 1, kReplacement};
  }
  for (int k = 1; k <= need; ++k) {
    if (static_cast<std::size_t>(k) >= n)
      return {Utf8Step::kIncomplete, static_cast<std::uint8_t>(k), kReplacement};
    const unsigned char b = p[k];
    if (b < lo || b > hi) return {Utf8Step::kInvalid, static_cast<std::uint8_t>(k), kReplacement};
    lo = 0x80, hi = 0xBF;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {Utf8Step::kValid, static_cast<std::uint8_t>(need + 1), cp};
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view s) {
  while (!s.empty()) {
    const auto st = utf8_step(s);
    if (st.kind != Utf8Step::kValid) return false;
    s.remove_prefix(st.len);
  }
  return true;
}

std::string lossy_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    // ASCII runs are copied in one go.
    std::size_t a = 0;
    while (a < s.size() && static_cast<unsigned char>(s[a]) < 0x80) ++a;
    out.append(s.substr(0, a));
    s.remove_prefix(a);
    if (s.empty()) break;
    const auto st = utf8_step(s);
    if (st.kind == Utf8Step::kValid)
      out.append(s.substr(0, st.len));
    else
      append_utf8(out, kReplacement);
    s.remove_prefix(st.len);
  }
  return out;
}

std::string_view trim_white_space(std::string_view s) {
  auto first_ws = [](std::string_view t) -> std::size_t {  // length of a leading white space char
    if (t.empty()) return 0;
    const auto st = utf8_step(t);
    return st.kind == Utf8Step::kValid && is_white_space(st.cp) ? st.len : 0;
  };
  while (std::size_t n = first_ws(s)) s.remove_prefix(n);
  while (!s.empty()) {
    std::size_t start = s.size() - 1;  // back up to the start of the last code point
    while (start > 0 && s.size() - start < 4 &&
           (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
      --start;
    const std::size_t n = first_ws(s.substr(start));
    if (n == 0 || start + n != s.size()) break;
    s.remove_suffix(n);
  }
  return s;
}

}  // namespace strata::unicode
