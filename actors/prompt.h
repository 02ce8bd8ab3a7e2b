// The one prompt assembly: a client's prompt, in one of its three forms, to the token ids the
// engine runs. IntakeActor::prepare (every request) and /tokenize (Engine::prompt_ids) both
// call assemble_prompt, so /tokenize reports exactly the ids a request with the same input is
// prompted with.
#pragma once

// GCC 12 with -fsanitize=address at -O2 reports a moved std::optional<std::vector<...>> of
// PromptInput as maybe uninitialized wherever one is built (a false positive); every file that
// builds a PromptInput includes this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/text/chat_message.h"
#include "runtime/text/chat_template.h"

namespace strata {

class Tokenizer;  // runtime/text/tokenizer.h

// Exactly one of text, ids, messages.
struct PromptInput {
  std::optional<std::string> text;                   // BOS per the tokenizer, then the encoding
  std::optional<std::vector<std::int32_t>> ids;      // used verbatim
  std::optional<std::vector<ChatMessage>> messages;  // rendered with the chat template
  ChatOptions chat;                                  // with messages: the template's options
  // Text only: false adds no BOS and encodes special-token text as plain text (/tokenize's
  // add_special_tokens). Requests always prompt with true.
  bool add_special_tokens = true;
};

// Throws InvalidRequest: "prompt" when not exactly one form is given, "messages" when `chat`
// is null (an engine without a chat template) and what chat_prompt_ids throws. Does not check
// emptiness, the vocabulary or the context limit (intake's business).
std::vector<std::int32_t> assemble_prompt(PromptInput in, const Tokenizer& tok,
                                          const ChatTemplate* chat);

}  // namespace strata
