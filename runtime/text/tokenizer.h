// Hugging Face `tokenizer.json` byte-level BPE (Llama-3 and Qwen2 pre-tokenizer regexes),
// with added/special tokens recognised in text as HF does (leftmost-longest), merges by rank,
// `ignore_merges`, and lossy UTF-8 decoding like HF's ByteLevel decoder.
// A loaded Tokenizer is immutable: every method is const and safe from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class Tokenizer {
 public:
  // tokenizer_config_json may be "" or name a file that does not exist (no bos/eos info).
  // Throws ModelError naming the file (unreadable, malformed, or not a supported byte-level
  // BPE; a bos/eos token that is not in the vocabulary).
  static std::unique_ptr<Tokenizer> load(const std::string& tokenizer_json_path,
                                         const std::string& tokenizer_config_json_path);
  ~Tokenizer();

  // Never adds BOS. allow_special = false treats special-token strings in `text` as plain
  // text (non-special added tokens are still recognised). Invalid UTF-8 bytes are encoded
  // as their byte tokens.
  std::vector<std::int32_t> encode(std::string_view text, bool allow_special = true) const;
  // Invalid UTF-8 -> U+FFFD like HF; ids with no token (out of range) are skipped like HF.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special = false) const;
  int vocab_size() const;  // highest id + 1 (model vocab and added tokens)
  // Exact token string lookup: an added token's content ("<|eot_id|>") or a vocab entry in
  // its byte-level form ("Ġthe").
  std::optional<std::int32_t> token_id(std::string_view token) const;
  std::string token_bytes(std::int32_t id) const;  // raw bytes of a token; "" if no such id
  bool is_special(std::int32_t id) const;
  std::optional<std::int32_t> bos_id() const;  // tokenizer_config.json bos_token, if any
  std::optional<std::int32_t> eos_id() const;  // tokenizer_config.json eos_token, if any
  // Whether a plain prompt should start with BOS: tokenizer_config.json `add_bos_token`, else
  // a TemplateProcessing post-processor that inserts the BOS token. (Chat templates place
  // BOS themselves.)
  bool adds_bos() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata
