// Streaming detokenization: ids in one at a time, valid UTF-8 out. Bytes of an unfinished
// UTF-8 sequence (random models emit lone byte tokens) are held back until they complete;
// bytes that can no longer complete become U+FFFD as soon as that is certain, and whatever is
// still held at finish() becomes one U+FFFD. The concatenation of every push() and finish()
// equals Tokenizer::decode of the whole sequence. One instance per sequence, not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/text/tokenizer.h"

namespace strata {

class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok, bool skip_special = false);
  std::string push(std::int32_t id);  // newly completed valid UTF-8 (possibly empty)
  std::string finish();               // flushes held incomplete bytes as U+FFFD
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;  // a prefix of a UTF-8 sequence that may still complete (< 4 bytes)
};

}  // namespace strata
