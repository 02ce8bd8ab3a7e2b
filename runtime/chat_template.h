// Built-in chat formats (Llama-3 Instruct, ChatML), chosen by matching the model's
// tokenizer_config.json `chat_template` text against the known templates. Templates are
// not interpreted: an unrecognised one is an error at load, which a config can override
// (model.chat_template: llama3 | chatml | none).
#pragma once

#include <string>
#include <vector>

#include "runtime/chat_message.h"

namespace strata {

enum class ChatFormat { kLlama3, kChatML, kNone };

// forced: "auto" | "llama3" | "chatml" | "none". "auto" matches the tokenizer_config.json
// chat_template against the built-in templates (path "" or no such file, or no chat_template
// -> kNone);
// unrecognised -> ConfigError("model.chat_template", ...) saying so and that it can be forced.
// An unreadable or malformed file is a ModelError naming it.
ChatFormat detect_chat_format(const std::string& tokenizer_config_json_path,
                              const std::string& forced);

// The prompt text (special tokens as text; encode with allow_special = true).
// kLlama3: bos_token before the first message, contents trimmed like the template's `| trim`.
// kNone: throws InvalidRequest("messages", ...) (the model has no chat format).
// Unknown roles are passed through as the template does; an empty role is InvalidRequest.
std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token);

const char* chat_format_name(ChatFormat f);  // "llama3" | "chatml" | "none"

}  // namespace strata
