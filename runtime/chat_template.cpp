#include "runtime/chat_template.h"

#include <boost/json.hpp>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/model_loader.h"
#include "runtime/unicode.h"

namespace strata {
namespace json = boost::json;

namespace {

// Known template texts, matched after normalize(): re-indented or re-escaped copies of the
// same template still match, a change to any literal text does not.
struct KnownTemplate {
  ChatFormat format;
  const char* name;
  const char* text;
};
const KnownTemplate kKnown[] = {
    // Meta-Llama-3-8B-Instruct, first release (always ends with the assistant header).
    {ChatFormat::kLlama3, "Meta-Llama-3-Instruct",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
     "+ "
     "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ "
     "content }}"
     "{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"},
    // Meta-Llama-3-Instruct, later revision (and `strata make-model`): prompt on request.
    {ChatFormat::kLlama3, "Meta-Llama-3-Instruct (add_generation_prompt)",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
     "+ "
     "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ "
     "content }}"
     "{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"},
    // ChatML as in the transformers documentation.
    {ChatFormat::kChatML, "ChatML",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
     "+ '<|im_end|>' + "
     "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"},
    // ChatML with the add_generation_prompt default (OpenHermes and others).
    {ChatFormat::kChatML, "ChatML (defaulted add_generation_prompt)",
     "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif "
     "%}"
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
     "+ '<|im_end|>' + "
     "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"},
};

// Inside {% %} and {{ }}, white space outside string literals is dropped; inside them the escapes
// \n, \t, \', \" and \\ are resolved and everything else is kept, so the output text must be
// identical.
std::string normalize(std::string_view t) {
  std::string out;
  char quote = 0;
  bool in_tag = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (quote) {
      if (c == '\\' && i + 1 < t.size()) {
        const char e = t[++i];
        out.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e);
        continue;
      }
      if (c == quote) quote = 0;
      out.push_back(c);
      continue;
    }
    if (!in_tag) {  // literal template text is output as is
      if (c == '{' && i + 1 < t.size() && (t[i + 1] == '%' || t[i + 1] == '{')) in_tag = true;
      out.push_back(c);
      continue;
    }
    if ((c == '%' || c == '}') && i + 1 < t.size() && t[i + 1] == '}') {
      in_tag = false;
      out += t.substr(i, 2);
      ++i;
      continue;
    }
    if (c == '\'' || c == '"') quote = c;
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    out.push_back(c);
  }
  return out;
}

std::string read_chat_template(const std::string& path) {
  const std::string text = read_text_file(path);
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec || !v.is_object())
    throw ModelError(path + ": invalid JSON" + (ec ? ": " + ec.message() : ""));
  const auto* t = v.as_object().if_contains("chat_template");
  if (!t || t->is_null()) return "";
  if (t->is_string()) return std::string(t->as_string());
  if (t->is_array()) {  // [{"name": "default", "template": "..."}, ...]
    for (const auto& e : t->as_array()) {
      if (!e.is_object()) continue;
      const auto* n = e.as_object().if_contains("name");
      const auto* tt = e.as_object().if_contains("template");
      if (n && n->is_string() && n->as_string() == "default" && tt && tt->is_string())
        return std::string(tt->as_string());
    }
    throw ConfigError("model.chat_template",
                      path +
                          ": chat_template list has no 'default' entry; force one of "
                          "llama3 | chatml | none with model.chat_template");
  }
  throw ModelError(path + ": chat_template is neither a string nor a list");
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
  switch (f) {
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kChatML:
      return "chatml";
    case ChatFormat::kNone:
      return "none";
  }
  return "none";
}

ChatFormat detect_chat_format(const std::string& tokenizer_config_json_path,
                              const std::string& forced) {
  if (forced == "llama3") return ChatFormat::kLlama3;
  if (forced == "chatml") return ChatFormat::kChatML;
  if (forced == "none") return ChatFormat::kNone;
  if (forced != "auto")
    throw ConfigError("model.chat_template",
                      "got '" + forced + "' (allowed: auto, llama3, chatml, none)");
  if (tokenizer_config_json_path.empty() || !std::filesystem::exists(tokenizer_config_json_path))
    return ChatFormat::kNone;
  const std::string tmpl = read_chat_template(tokenizer_config_json_path);
  if (tmpl.empty()) return ChatFormat::kNone;
  const std::string n = normalize(tmpl);
  for (const auto& k : kKnown)
    if (normalize(k.text) == n) return k.format;
  std::string head = tmpl.substr(0, 120);
  for (auto& c : head)
    if (c == '\n') c = ' ';
  throw ConfigError(
      "model.chat_template",
      tokenizer_config_json_path +
          ": the chat_template is not one of the built-in templates (Llama-3 Instruct, ChatML) and "
          "is not interpreted; force a format with model.chat_template: llama3 | chatml | none "
          "(template starts: \"" +
          head + (tmpl.size() > head.size() ? "...\")" : "\")"));
}

std::string apply_chat_template(ChatFormat f, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token) {
  if (f == ChatFormat::kNone)
    throw InvalidRequest(
        "messages",
        "this model has no chat template; send a plain prompt to /v1/completions instead");
  for (std::size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role.empty())
      throw InvalidRequest("messages", "messages[" + std::to_string(i) + "].role is empty");
  std::string out;
  if (f == ChatFormat::kLlama3) {
    for (std::size_t i = 0; i < messages.size(); ++i) {
      if (i == 0) out += bos_token;
      out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
      out += unicode::trim_white_space(messages[i].content);
      out += "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  } else {
    for (const auto& m : messages)
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
  }
  return out;
}

}  // namespace strata
