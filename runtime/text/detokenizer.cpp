#include "runtime/text/detokenizer.h"

#include "runtime/text/unicode.h"

namespace strata {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(std::int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return "";
  pending_ += tok_.token_bytes(id);
  // Emit everything up to a trailing unfinished sequence; a maximal invalid subpart is
  // already final (no later byte can repair it), so it becomes U+FFFD now, exactly where
  // decode() of the whole would put it.
  std::string out;
  std::string_view s = pending_;
  while (!s.empty()) {
    const auto st = unicode::utf8_step(s);
    if (st.kind == unicode::Utf8Step::kIncomplete) break;
    if (st.kind == unicode::Utf8Step::kValid)
      out.append(s.substr(0, st.len));
    else
      unicode::append_utf8(out, unicode::kReplacement);
    s.remove_prefix(st.len);
  }
  pending_.erase(0, pending_.size() - s.size());
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = unicode::lossy_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace strata
