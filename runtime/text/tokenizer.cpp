#include "runtime/text/tokenizer.h"

#include <algorithm>

#include "runtime/text/tokenizer_impl.h"
#include "runtime/text/unicode.h"

// Encoding (pre-tokenizer regex, BPE merges by rank, added tokens) and decoding; the loader
// is runtime/text/tokenizer_load.cpp.
namespace strata {

using tok::ascii_lower;
using tok::Char;
using tok::char_at;
using unicode::CharClass;

std::size_t Tokenizer::Impl::piece_end(std::string_view s, std::size_t i) const {
  const std::size_t n = s.size();
  const Char c0 = char_at(s, i);
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (c0.cp == '\'' && i + 1 < n) {
    const unsigned char a = ascii_lower(s[i + 1]);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if (i + 2 < n) {
      const unsigned char b = ascii_lower(s[i + 2]);
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
      // U+017F LATIN SMALL LETTER LONG S case-folds to 's' (Oniguruma, tiktoken).
      if (s[i + 1] == '\xC5' && s[i + 2] == '\xBF') return i + 3;
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  std::size_t j = std::string_view::npos;
  if (c0.cls == CharClass::kLetter) {
    j = i;
  } else if (c0.cls != CharClass::kNumber && c0.cp != '\r' && c0.cp != '\n' && i + c0.len < n &&
             char_at(s, i + c0.len).cls == CharClass::kLetter) {
    j = i + c0.len;
  }
  if (j != std::string_view::npos) {
    while (j < n) {
      const Char c = char_at(s, j);
      if (c.cls != CharClass::kLetter) break;
      j += c.len;
    }
    return j;
  }
  // \p{N}{1,3}
  if (c0.cls == CharClass::kNumber) {
    j = i;
    for (int k = 0; k < max_digits && j < n; ++k) {
      const Char c = char_at(s, j);
      if (c.cls != CharClass::kNumber) break;
      j += c.len;
    }
    return j;
  }
  // ' '?[^\s\p{L}\p{N}]+[\r\n]*
  j = i;
  if (c0.cp == ' ' && i + 1 < n && char_at(s, i + 1).cls == CharClass::kOther) j = i + 1;
  if (j > i || c0.cls == CharClass::kOther) {
    while (j < n) {
      const Char c = char_at(s, j);
      if (c.cls != CharClass::kOther) break;
      j += c.len;
    }
    while (j < n && (s[j] == '\r' || s[j] == '\n')) ++j;
    return j;
  }
  // c0 is white space: \s*[\r\n]+ | \s+(?!\S) | \s+
  std::size_t last_nl = std::string_view::npos, last_start = i;
  j = i;
  while (j < n) {
    const Char c = char_at(s, j);
    if (c.cls != CharClass::kSpace) break;
    if (c.cp == '\r' || c.cp == '\n') last_nl = j;
    last_start = j;
    j += c.len;
  }
  if (last_nl != std::string_view::npos) return last_nl + 1;
  if (j == n) return j;
  if (last_start > i) return last_start;  // leave the last space to the next word
  return j;
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
  struct Sym {
    std::int32_t id, prev, next, len;
  };
  struct Cand {
    std::int32_t rank, pos, id;
  };
  thread_local std::vector<Sym> syms;
  thread_local std::vector<Cand> heap;
  syms.clear();
  heap.clear();
  const auto n = static_cast<std::int32_t>(piece.size());
  for (std::int32_t i = 0; i < n; ++i)
    syms.push_back({byte_id[static_cast<unsigned char>(piece[static_cast<std::size_t>(i)])], i - 1,
                    i + 1 < n ? i + 1 : -1, 1});
  auto later = [](const Cand& x, const Cand& y) {
    return x.rank > y.rank || (x.rank == y.rank && x.pos > y.pos);
  };
  auto consider = [&](std::int32_t a) {
    const std::int32_t b = syms[static_cast<std::size_t>(a)].next;
    if (b < 0) return;
    if (const auto* m = merges.find(syms[static_cast<std::size_t>(a)].id,
                                    syms[static_cast<std::size_t>(b)].id)) {
      heap.push_back({m->rank, a, m->id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Cand c = heap.back();
    heap.pop_back();
    Sym& a = syms[static_cast<std::size_t>(c.pos)];
    if (a.len == 0 || a.next < 0) continue;
    Sym& b = syms[static_cast<std::size_t>(a.next)];
    const auto* m = merges.find(a.id, b.id);
    if (!m || m->rank != c.rank) continue;  // stale: a neighbour changed since
    a.id = c.id;
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (a.next >= 0) syms[static_cast<std::size_t>(a.next)].prev = c.pos;
    if (a.prev >= 0) consider(a.prev);
    consider(c.pos);
  }
  for (std::int32_t i = 0; i >= 0 && i < n; i = syms[static_cast<std::size_t>(i)].next)
    out.push_back(syms[static_cast<std::size_t>(i)].id);
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges) {
    if (const auto id = vocab.find(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  bpe(piece, out);
}

void Tokenizer::Impl::encode_plain(std::string_view s, std::vector<std::int32_t>& out) const {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t j = piece_end(s, i);
    encode_piece(s.substr(i, j - i), out);
    i = j;
  }
}

namespace {
bool is_word_char(const Char& c) {
  return c.cls == CharClass::kLetter || c.cls == CharClass::kNumber || c.cp == '_';
}
}  // namespace

bool Tokenizer::Impl::find_added(std::string_view s, std::size_t from, bool allow_special,
                                 std::size_t& start, std::size_t& end, std::size_t& index) const {
  for (std::size_t i = from; i < s.size(); ++i) {
    if (!added_first[static_cast<unsigned char>(s[i])]) continue;
    for (const std::size_t len : added_lengths) {
      if (i + len > s.size()) continue;
      const auto k = added_index.find(s.substr(i, len));
      if (k < 0) continue;
      const AddedToken& t = added[static_cast<std::size_t>(k)];
      if (t.special && !allow_special) continue;
      std::size_t b = i, e = i + len;
      if (t.single_word) {
        std::size_t p = b;  // previous char start
        if (b > 0) {
          p = b - 1;
          while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        }
        if ((b > 0 && is_word_char(char_at(s, p))) || (e < s.size() && is_word_char(char_at(s, e))))
          continue;
      }
      if (t.lstrip)
        while (b > from) {
          std::size_t p = b - 1;
          while (p > from && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
          if (char_at(s, p).cls != CharClass::kSpace) break;
          b = p;
        }
      if (t.rstrip)
        while (e < s.size()) {
          const Char c = char_at(s, e);
          if (c.cls != CharClass::kSpace) break;
          e += c.len;
        }
      start = b, end = e, index = static_cast<std::size_t>(k);
      return true;
    }
  }
  return false;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  const Impl& im = *impl_;
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 4);
  const bool scan = !im.added.empty() && (allow_special || im.any_non_special_added);
  std::size_t pos = 0;
  std::size_t start = 0, end = 0, index = 0;
  while (scan && im.find_added(text, pos, allow_special, start, end, index)) {
    im.encode_plain(text.substr(pos, start - pos), out);
    out.push_back(im.added[index].id);
    pos = end;
  }
  im.encode_plain(text.substr(pos), out);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special) const {
  const Impl& im = *impl_;
  std::string bytes;
  for (const auto id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= im.id_bytes.size()) continue;
    const auto f = im.flags[static_cast<std::size_t>(id)];
    if (skip_special && (f & Impl::kSpecial)) continue;
    bytes += im.id_bytes[static_cast<std::size_t>(id)];
  }
  return unicode::lossy_utf8(bytes);
}

int Tokenizer::vocab_size() const {
  return static_cast<int>(impl_->id_bytes.size());
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  if (const auto k = impl_->added_index.find(token); k >= 0)
    return impl_->added[static_cast<std::size_t>(k)].id;
  if (const auto b = tok::byte_level().to_bytes(token))
    if (const auto id = impl_->vocab.find(*b); id >= 0) return id;
  return std::nullopt;
}

std::string Tokenizer::token_bytes(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= impl_->id_bytes.size()) return "";
  return impl_->id_bytes[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(std::int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < impl_->flags.size() &&
         (impl_->flags[static_cast<std::size_t>(id)] & Impl::kSpecial);
}

std::optional<std::int32_t> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<std::int32_t> Tokenizer::eos_id() const {
  return impl_->eos;
}
bool Tokenizer::adds_bos() const {
  return impl_->adds_bos;
}

}  // namespace strata
