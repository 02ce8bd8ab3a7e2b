// The data structures of the byte-level BPE tokenizer (runtime/text/tokenizer.h), private to
// runtime/text/tokenizer*.cpp: open-addressing maps of byte strings and merge pairs, GPT-2's
// byte <-> code point mapping, and the character classes the pre-tokenizer regexes test.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/unicode.h"

namespace strata::tok {

using unicode::CharClass;

inline std::uint64_t hash_bytes(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then a final mix
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h ^ (h >> 29);
}

// Open-addressing map from byte strings to ids (keys live in one arena).
class BytesMap {
 public:
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  bool insert(std::string_view key, std::int32_t id) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    const auto h = hash_bytes(key);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = {static_cast<std::uint32_t>(arena_.size()), static_cast<std::uint32_t>(key.size()), id,
             static_cast<std::uint32_t>(h)};
        arena_.append(key);
        ++size_;
        return true;
      }
      if (s.hash == static_cast<std::uint32_t>(h) && view(s) == key) return false;
    }
  }
  std::int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const auto h = hash_bytes(key);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == static_cast<std::uint32_t>(h) && view(s) == key) return s.id;
    }
  }
  std::size_t size() const { return size_; }

 private:
  struct Slot {
    std::uint32_t off = 0, len = 0;
    std::int32_t id = -1;
    std::uint32_t hash = 0;
  };
  std::string_view view(const Slot& s) const {
    return std::string_view(arena_).substr(s.off, s.len);
  }
  void grow() {
    auto old = std::move(slots_);
    reserve(std::max<std::size_t>(16, old.size()));
    for (const Slot& s : old)
      if (s.id >= 0)
        for (std::size_t i = hash_bytes(view(s)) & mask_;; i = (i + 1) & mask_)
          if (slots_[i].id < 0) {
            slots_[i] = s;
            break;
          }
  }
  std::string arena_;
  std::vector<Slot> slots_;
  std::size_t mask_ = 0, size_ = 0;
};

// (left id, right id) -> (rank, merged id).
class MergeMap {
 public:
  struct Merge {
    std::int32_t rank, id;
  };
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap <<= 1;
    keys_.assign(cap, kEmpty);
    vals_.assign(cap, Merge{0, 0});
    mask_ = cap - 1;
  }
  // Keeps the first (lowest-rank) entry of a repeated pair, as HF does.
  void insert(std::int32_t a, std::int32_t b, Merge m) {
    const auto k = key(a, b);
    for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return;
      if (keys_[i] == kEmpty) {
        keys_[i] = k, vals_[i] = m;
        return;
      }
    }
  }
  const Merge* find(std::int32_t a, std::int32_t b) const {
    const auto k = key(a, b);
    for (std::size_t i = slot(k);; i = (i + 1) & mask_) {
      if (keys_[i] == k) return &vals_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr std::uint64_t kEmpty = ~0ull;
  static std::uint64_t key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
           static_cast<std::uint32_t>(b);
  }
  std::size_t slot(std::uint64_t k) const { return ((k * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<std::uint64_t> keys_;
  std::vector<Merge> vals_;
  std::size_t mask_ = 0;
};

// GPT-2's byte <-> printable code point mapping of byte-level BPE.
struct ByteLevelMap {
  std::array<char32_t, 256> byte_to_cp{};
  std::array<int, 324> cp_to_byte{};  // -1: not a byte-level char
  ByteLevelMap() {
    cp_to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_cp[static_cast<std::size_t>(b)] =
          printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      cp_to_byte[byte_to_cp[static_cast<std::size_t>(b)]] = b;
    }
  }
  // The bytes a byte-level token string stands for; nullopt if a char is not in the mapping.
  std::optional<std::string> to_bytes(std::string_view token) const {
    std::string out;
    out.reserve(token.size());
    while (!token.empty()) {
      const auto st = unicode::utf8_step(token);
      if (st.kind != unicode::Utf8Step::kValid || st.cp >= cp_to_byte.size() ||
          cp_to_byte[st.cp] < 0)
        return std::nullopt;
      out.push_back(static_cast<char>(cp_to_byte[st.cp]));
      token.remove_prefix(st.len);
    }
    return out;
  }
};

inline const ByteLevelMap& byte_level() {
  static const ByteLevelMap m;
  return m;
}

struct Char {
  CharClass cls;
  std::uint32_t len;
  char32_t cp;
};

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      t[static_cast<std::size_t>(c)] = CharClass::kLetter;
    else if (c >= '0' && c <= '9')
      t[static_cast<std::size_t>(c)] = CharClass::kNumber;
    else if ((c >= 0x09 && c <= 0x0D) || c == ' ')
      t[static_cast<std::size_t>(c)] = CharClass::kSpace;
    else
      t[static_cast<std::size_t>(c)] = CharClass::kOther;
  }
  return t;
}
inline constexpr auto kAsciiClass = make_ascii_classes();

// The character at s[i] (i < s.size()). Invalid UTF-8 counts as one kOther character.
inline Char char_at(std::string_view s, std::size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {kAsciiClass[b], 1, b};
  const auto st = unicode::utf8_step(s.substr(i));
  if (st.kind != unicode::Utf8Step::kValid)
    return {CharClass::kOther, st.len, unicode::kReplacement};
  return {unicode::char_class(st.cp), st.len, st.cp};
}

inline unsigned char ascii_lower(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 'A' && u <= 'Z') ? static_cast<unsigned char>(u + 32) : u;
}

}  // namespace strata::tok
