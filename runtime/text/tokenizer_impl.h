// Tokenizer::Impl, the loaded tokenizer (runtime/text/tokenizer.h), shared by the loader
// (tokenizer_load.cpp) and the encoder/decoder (tokenizer.cpp). Private to runtime/text/.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"
#include "runtime/text/bpe_tables.h"
#include "runtime/text/tokenizer.h"

namespace strata {

namespace tok {
struct AddedToken {
  std::string content;
  std::int32_t id;
  bool special, lstrip, rstrip, single_word;
};

}  // namespace tok

struct Tokenizer::Impl {
  using BytesMap = tok::BytesMap;
  using MergeMap = tok::MergeMap;
  using AddedToken = tok::AddedToken;

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

  // End of the pre-token starting at s[i]: the Llama-3 regex (Qwen2's with max_digits 1),
  // alternatives in order.
  std::size_t piece_end(std::string_view s, std::size_t i) const;
  void bpe(std::string_view piece, std::vector<std::int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<std::int32_t>& out) const;
  void encode_plain(std::string_view s, std::vector<std::int32_t>& out) const;
  // Leftmost-longest added token at or after `from`: [start, end) including stripped
  // white space, and the token's index. false if none.
  bool find_added(std::string_view s, std::size_t from, bool allow_special, std::size_t& start,
                  std::size_t& end, std::size_t& index) const;
};

}  // namespace strata
