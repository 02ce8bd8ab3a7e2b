// How a chat request becomes a prompt: the checkpoint's own Jinja chat template, rendered by
// runtime/text/jinja/ the way Hugging Face transformers renders it (apply_chat_template) and vLLM
// serves it, or a built-in format for checkpoints without one.
//
// Which template (model.chat_template, `strata serve --chat-template`):
//   auto (default)   chat_template.jinja next to tokenizer_config.json if present, else
//                    tokenizer_config.json's `chat_template` (a string, or the list form's
//                    "default" entry); a checkpoint with neither has no chat format
//   llama3 | chatml  the built-in Llama-3 Instruct / ChatML template (whatever the checkpoint has)
//   none             no chat format: chat requests are refused
//   anything else    a path to a Jinja template file, or (with "{{" or "{%" in it, as vLLM's
//                    --chat-template) the template text itself
// A template that does not parse, or uses a construct outside the supported subset, is a
// ConfigError("model.chat_template", "<where>: line N: ...") at load.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/text/chat_message.h"
#include "runtime/error.h"
#include "runtime/text/jinja/jinja.h"

namespace strata {

class Tokenizer;

// The per-request parts of a chat rendering (OpenAI / vLLM fields of the same names).
struct ChatOptions {
  bool add_generation_prompt = true;
  // The last message (an assistant's, normally) is left open: the rendering ends right after
  // its content, without the end-of-turn the template writes; excludes add_generation_prompt.
  bool continue_final_message = false;
  boost::json::object kwargs;  // chat_template_kwargs: extra template variables
  std::shared_ptr<const jinja::Template> request_template;  // the request's chat_template
  std::optional<std::time_t> now;  // strftime_now's clock (tests); unset: the current time
};

class ChatTemplate {
 public:
  // Throws ConfigError("model.chat_template", ...) (bad setting, unreadable file, template
  // that does not parse) or ModelError (malformed tokenizer_config.json). The file may be
  // missing ("" or no such path): then only the built-ins or a file can be used.
  static std::shared_ptr<const ChatTemplate> load(const std::string& tokenizer_config_json_path,
                                                  const std::string& setting);
  // A template from its text (tests, tools); `origin` names it in messages.
  static std::shared_ptr<const ChatTemplate> from_text(const std::string& text,
                                                       boost::json::object special_tokens,
                                                       const std::string& origin);

  bool available() const { return static_cast<bool>(template_); }
  const std::string& origin() const { return origin_; }  // e.g. "tokenizer_config.json"
  // bos_token, eos_token, unk_token, pad_token as tokenizer_config.json gives them.
  const boost::json::object& special_tokens() const { return special_tokens_; }

  // The prompt text. Throws InvalidRequest naming the field: "messages" (no chat format, empty
  // messages, the template's raise_exception or another rendering failure),
  // "continue_final_message" (with add_generation_prompt, or the final message not found in
  // the rendering), "chat_template_kwargs" (sets `messages`).
  std::string render(const std::vector<ChatMessage>& messages, const ChatOptions& options) const;

 private:
  std::shared_ptr<const jinja::Template> template_;
  boost::json::object special_tokens_;
  std::string origin_;
};

// The prompt token ids of a chat request: the rendering encoded with special tokens
// recognised and nothing added, as HF's apply_chat_template(tokenize=True) and vLLM's chat
// endpoint do (add_special_tokens=False). The template is the only source of BOS, so a template
// that writes bos_token gives exactly one even when the tokenizer adds BOS to plain text.
// The one prompt assembly for chat: the intake and /tokenize both call it.
std::vector<std::int32_t> chat_prompt_ids(const ChatTemplate& t, const Tokenizer& tok,
                                          const std::vector<ChatMessage>& messages,
                                          const ChatOptions& options);

// A request's `chat_template` text; InvalidRequest("chat_template", "line N: ...") when it
// does not parse. (Inline: the API's request parser, fuzzed alone, links only runtime/text/jinja.)
inline std::shared_ptr<const jinja::Template> parse_request_chat_template(const std::string& text) {
  try {
    return std::make_shared<const jinja::Template>(jinja::Template::parse(text));
  } catch (const jinja::TemplateError& e) {
    throw InvalidRequest("chat_template",
                         std::string("'chat_template' does not parse: ") + e.what());
  }
}

// The built-in template texts ("llama3", "chatml"); nullptr for other names.
const char* builtin_chat_template(const std::string& name);

}  // namespace strata
