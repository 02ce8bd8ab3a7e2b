#include "runtime/tokenizer.h"

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <filesystem>
#include <limits>

#include "runtime/error.h"
#include "runtime/model_loader.h"
#include "runtime/unicode.h"

namespace strata {
namespace json = boost::json;
using unicode::CharClass;

namespace {

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen2's pattern: Llama-3's with single digits.
constexpr const char* kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::uint64_t hash_bytes(std::string_view s) {
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

const ByteLevelMap& byte_level() {
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
constexpr auto kAsciiClass = make_ascii_classes();

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

struct AddedToken {
  std::string content;
  std::int32_t id;
  bool special, lstrip, rstrip, single_word;
};

std::string str_of(const json::value* v) {
  if (!v) return "";
  if (v->is_string()) return std::string(v->as_string());
  if (v->is_object()) {  // {"content": "...", ...} (AddedToken form in older configs)
    if (const auto* c = v->as_object().if_contains("content"); c && c->is_string())
      return std::string(c->as_string());
  }
  return "";
}

json::value parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) throw ModelError(path + ": invalid JSON: " + ec.message());
  if (!v.is_object()) throw ModelError(path + ": expected a JSON object at the top level");
  return v;
}

}  // namespace

struct Tokenizer::Impl {
  std::string path;
  BytesMap vocab;  // raw bytes -> id
  MergeMap merges;
  std::array<std::int32_t, 256> byte_id{};
  std::vector<std::string> id_bytes;
  std::vector<std::uint8_t> flags;  // kPresent | kSpecial
  std::vector<AddedToken> added;
  BytesMap added_index;  // content -> index in `added`
  std::array<bool, 256> added_first{};
  std::vector<std::size_t> added_lengths;  // distinct, descending
  bool any_non_special_added = false;
  bool ignore_merges = false;
  int max_digits = 3;
  std::optional<std::int32_t> bos, eos;
  bool adds_bos = false;

  static constexpr std::uint8_t kPresent = 1, kSpecial = 2;

  void set_token(std::int32_t id, std::string bytes, bool special) {
    if (id < 0) throw ModelError(path + ": negative token id " + std::to_string(id));
    const auto u = static_cast<std::size_t>(id);
    if (u >= id_bytes.size()) {
      id_bytes.resize(u + 1);
      flags.resize(u + 1, 0);
    }
    id_bytes[u] = std::move(bytes);
    flags[u] = static_cast<std::uint8_t>(kPresent | (special ? kSpecial : 0));
  }

  // End of the pre-token starting at s[i]: the Llama-3 regex, alternatives in order.
  std::size_t piece_end(std::string_view s, std::size_t i) const {
    const std::size_t n = s.size();
    const Char c0 = char_at(s, i);
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c0.cp == '\'' && i + 1 < n) {
      const unsigned char a = ascii_lower(s[i + 1]);
      if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
      if (i + 2 < n) {
        const unsigned char b = ascii_lower(s[i + 2]);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
          return i + 3;
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

  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const {
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
      syms.push_back({byte_id[static_cast<unsigned char>(piece[static_cast<std::size_t>(i)])],
                      i - 1, i + 1 < n ? i + 1 : -1, 1});
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

  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const {
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

  void encode_plain(std::string_view s, std::vector<std::int32_t>& out) const {
    for (std::size_t i = 0; i < s.size();) {
      const std::size_t j = piece_end(s, i);
      encode_piece(s.substr(i, j - i), out);
      i = j;
    }
  }

  static bool is_word_char(const Char& c) {
    return c.cls == CharClass::kLetter || c.cls == CharClass::kNumber || c.cp == '_';
  }

  // Leftmost-longest added token at or after `from`: [start, end) including stripped
  // white space, and the token's index. false if none.
  bool find_added(std::string_view s, std::size_t from, bool allow_special, std::size_t& start,
                  std::size_t& end, std::size_t& index) const {
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
          if ((b > 0 && is_word_char(char_at(s, p))) ||
              (e < s.size() && is_word_char(char_at(s, e))))
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
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& tokenizer_json_path,
                                           const std::string& tokenizer_config_json_path) {
  auto im = std::make_unique<Impl>();
  im->path = tokenizer_json_path;
  const std::string& P = tokenizer_json_path;
  const json::value root = parse_json_file(P);
  const auto& top = root.as_object();
  auto fail = [&](const std::string& what) { throw ModelError(P + ": " + what); };
  const auto type_of = [](const json::value* v) -> std::string {
    if (!v || !v->is_object()) return "";
    const auto* t = v->as_object().if_contains("type");
    return t && t->is_string() ? std::string(t->as_string()) : "";
  };

  // Pipeline: no normalizer, Split(Llama-3 or Qwen2 regex) + ByteLevel, BPE, ByteLevel decoder.
  if (const auto* nz = top.if_contains("normalizer"); nz && !nz->is_null())
    fail("normalizer '" + type_of(nz) +
         "' is not supported (byte-level BPE without normalizer only)");
  const auto* pre = top.if_contains("pre_tokenizer");
  bool regex_ok = false, byte_level_ok = false;
  if (type_of(pre) == "Sequence") {
    const auto* list = pre->as_object().if_contains("pretokenizers");
    if (list && list->is_array()) {
      for (const auto& p : list->as_array()) {
        const std::string t = type_of(&p);
        if (t == "Split") {
          const auto* pat = p.as_object().if_contains("pattern");
          const auto* rx =
              pat && pat->is_object() ? pat->as_object().if_contains("Regex") : nullptr;
          const std::string r = rx && rx->is_string() ? std::string(rx->as_string()) : "";
          const auto* beh = p.as_object().if_contains("behavior");
          const auto* inv = p.as_object().if_contains("invert");
          if (!beh || !beh->is_string() || beh->as_string() != "Isolated" ||
              (inv && inv->is_bool() && inv->as_bool()))
            fail("pre_tokenizer Split must be behavior Isolated, invert false");
          if (r == kLlama3Regex)
            im->max_digits = 3;
          else if (r == kQwen2Regex)
            im->max_digits = 1;
          else
            fail("pre_tokenizer Split regex is not the Llama-3 or Qwen2 pattern: " + r);
          regex_ok = true;
        } else if (t == "ByteLevel") {
          const auto* ur = p.as_object().if_contains("use_regex");
          const auto* aps = p.as_object().if_contains("add_prefix_space");
          if ((ur && ur->is_bool() && ur->as_bool()) || (aps && aps->is_bool() && aps->as_bool()))
            fail("pre_tokenizer ByteLevel must have use_regex false and add_prefix_space false");
          byte_level_ok = regex_ok;  // must come after the Split
        } else {
          fail("pre_tokenizer '" + t + "' is not supported");
        }
      }
    }
  }
  if (!regex_ok || !byte_level_ok)
    fail("unsupported pre_tokenizer: expected Sequence[Split(Llama-3/Qwen2 regex), ByteLevel]");
  if (const auto* dec = top.if_contains("decoder");
      dec && !dec->is_null() && type_of(dec) != "ByteLevel")
    fail("decoder '" + type_of(dec) + "' is not supported (ByteLevel only)");

  const auto* model = top.if_contains("model");
  if (!model || !model->is_object()) fail("missing \"model\"");
  const auto& mo = model->as_object();
  if (const auto t = type_of(model); !t.empty() && t != "BPE")
    fail("model type '" + t + "' is not BPE");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const auto* v = mo.if_contains(k); v && !v->is_null())
      fail(std::string("model.") + k + " is not supported");
  if (const auto* im_ = mo.if_contains("ignore_merges"); im_ && im_->is_bool())
    im->ignore_merges = im_->as_bool();
  const auto* vocab = mo.if_contains("vocab");
  const auto* merges = mo.if_contains("merges");
  if (!vocab || !vocab->is_object()) fail("model.vocab missing or not an object");
  if (!merges || !merges->is_array()) fail("model.merges missing or not an array");

  const auto& bl = byte_level();
  im->vocab.reserve(vocab->as_object().size());
  for (const auto& kv : vocab->as_object()) {
    if (!kv.value().is_int64())
      fail("model.vocab['" + std::string(kv.key()) + "'] is not an integer id");
    const auto bytes = bl.to_bytes(kv.key());
    if (!bytes)
      fail("vocab entry '" + std::string(kv.key()) + "' is not byte-level (not a byte-level BPE)");
    const auto id = static_cast<std::int32_t>(kv.value().as_int64());
    if (!im->vocab.insert(*bytes, id))
      fail("duplicate vocab entry '" + std::string(kv.key()) + "'");
    im->set_token(id, *bytes, false);
  }
  for (int b = 0; b < 256; ++b) {
    const auto id = im->vocab.find(std::string(1, static_cast<char>(b)));
    if (id < 0)
      fail("vocab has no token for byte " + std::to_string(b) + " (not a byte-level BPE)");
    im->byte_id[static_cast<std::size_t>(b)] = id;
  }
  const auto& ma = merges->as_array();
  im->merges.reserve(ma.size());
  for (std::size_t r = 0; r < ma.size(); ++r) {
    std::string_view a, b;
    if (ma[r].is_string()) {  // "a b"
      const std::string_view s = ma[r].as_string();
      const auto sp = s.find(' ');
      if (sp == std::string_view::npos)
        fail("merge " + std::to_string(r) + " '" + std::string(s) + "' has no space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (ma[r].is_array() && ma[r].as_array().size() == 2 &&
               ma[r].as_array()[0].is_string() && ma[r].as_array()[1].is_string()) {  // ["a", "b"]
      a = ma[r].as_array()[0].as_string(), b = ma[r].as_array()[1].as_string();
    } else {
      fail("merge " + std::to_string(r) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    const auto ab = bl.to_bytes(a), bb = bl.to_bytes(b);
    const std::int32_t ia = ab ? im->vocab.find(*ab) : -1, ib = bb ? im->vocab.find(*bb) : -1;
    const std::int32_t im_id = ia >= 0 && ib >= 0 ? im->vocab.find(*ab + *bb) : -1;
    if (im_id < 0)
      fail("merge " + std::to_string(r) + " '" + std::string(a) + " " + std::string(b) +
           "' uses or makes a token not in the vocab");
    im->merges.insert(ia, ib, {static_cast<std::int32_t>(r), im_id});
  }

  if (const auto* at = top.if_contains("added_tokens"); at && at->is_array()) {
    im->added_index.reserve(at->as_array().size());
    for (const auto& v : at->as_array()) {
      if (!v.is_object()) fail("added_tokens entry is not an object");
      const auto& o = v.as_object();
      const auto* id = o.if_contains("id");
      const auto* content = o.if_contains("content");
      if (!id || !id->is_int64() || !content || !content->is_string() ||
          content->as_string().empty())
        fail("added_tokens entry without integer id and non-empty content");
      auto flag = [&](const char* k) {
        const auto* f = o.if_contains(k);
        return f && f->is_bool() && f->as_bool();
      };
      AddedToken t{std::string(content->as_string()),
                   static_cast<std::int32_t>(id->as_int64()),
                   flag("special"),
                   flag("lstrip"),
                   flag("rstrip"),
                   flag("single_word")};
      if (!im->added_index.insert(t.content, static_cast<std::int32_t>(im->added.size())))
        fail("duplicate added token '" + t.content + "'");
      // HF's ByteLevel decoder: byte-level chars map to their bytes, otherwise the raw text.
      auto bytes = bl.to_bytes(t.content);
      im->set_token(t.id, bytes ? *bytes : t.content, t.special);
      im->added_first[static_cast<unsigned char>(t.content[0])] = true;
      im->added_lengths.push_back(t.content.size());
      im->any_non_special_added |= !t.special;
      im->added.push_back(std::move(t));
    }
    std::sort(im->added_lengths.begin(), im->added_lengths.end(), std::greater<>());
    im->added_lengths.erase(std::unique(im->added_lengths.begin(), im->added_lengths.end()),
                            im->added_lengths.end());
  }

  // tokenizer_config.json: BOS / EOS and whether plain prompts get BOS.
  std::optional<bool> add_bos_cfg;
  std::string bos_text;
  if (!tokenizer_config_json_path.empty() && std::filesystem::exists(tokenizer_config_json_path)) {
    const json::value cfg = parse_json_file(tokenizer_config_json_path);
    const auto& co = cfg.as_object();
    auto lookup = [&](const char* key) -> std::optional<std::int32_t> {
      const std::string s = str_of(co.if_contains(key));
      if (s.empty()) return std::nullopt;
      if (const auto k = im->added_index.find(s); k >= 0)
        return im->added[static_cast<std::size_t>(k)].id;
      if (const auto b = bl.to_bytes(s))
        if (const auto id = im->vocab.find(*b); id >= 0) return id;
      throw ModelError(tokenizer_config_json_path + ": " + key + " '" + s + "' is not a token of " +
                       P);
    };
    im->bos = lookup("bos_token");
    im->eos = lookup("eos_token");
    bos_text = str_of(co.if_contains("bos_token"));
    if (const auto* ab = co.if_contains("add_bos_token"); ab && ab->is_bool())
      add_bos_cfg = ab->as_bool();
  }
  // A TemplateProcessing post-processor (alone, or inside a Sequence as in Meta's files)
  // whose single-sequence template starts with the BOS token.
  auto template_adds_bos = [&](const json::value* pp) {
    if (type_of(pp) != "TemplateProcessing") return false;
    const auto* single = pp->as_object().if_contains("single");
    if (!single || !single->is_array() || single->as_array().empty()) return false;
    const auto& first = single->as_array()[0];
    const auto* st = first.is_object() ? first.as_object().if_contains("SpecialToken") : nullptr;
    const auto* sid = st && st->is_object() ? st->as_object().if_contains("id") : nullptr;
    return sid && sid->is_string() && sid->as_string() == bos_text;
  };
  if (add_bos_cfg) {
    im->adds_bos = *add_bos_cfg && im->bos.has_value();
  } else if (const auto* pp = top.if_contains("post_processor"); im->bos && pp) {
    im->adds_bos = template_adds_bos(pp);
    if (type_of(pp) == "Sequence")
      if (const auto* list = pp->as_object().if_contains("processors"); list && list->is_array())
        for (const auto& p : list->as_array()) im->adds_bos = im->adds_bos || template_adds_bos(&p);
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(im)));
}

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
  if (const auto b = byte_level().to_bytes(token))
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
