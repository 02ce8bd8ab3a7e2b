#include "actors/prompt.h"

#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

namespace strata {

std::vector<std::int32_t> assemble_prompt(PromptInput in, const Tokenizer& tok,
                                          const ChatTemplate* chat) {
  const int forms = (in.text ? 1 : 0) + (in.ids ? 1 : 0) + (in.messages ? 1 : 0);
  if (forms != 1) {
    throw InvalidRequest("prompt",
                         "exactly one of prompt text, prompt token ids or chat messages "
                         "is required (got " +
                             std::to_string(forms) + ")");
  }
  if (in.ids) return std::move(*in.ids);
  if (in.messages) {
    if (!chat) throw InvalidRequest("messages", "this engine has no chat template");
    return chat_prompt_ids(*chat, tok, *in.messages, in.chat);
  }
  std::vector<std::int32_t> ids;
  if (in.add_special_tokens && tok.adds_bos()) {
    if (auto bos = tok.bos_id()) ids.push_back(*bos);
  }
  const auto enc = tok.encode(*in.text, in.add_special_tokens);
  ids.insert(ids.end(), enc.begin(), enc.end());
  return ids;
}

}  // namespace strata
