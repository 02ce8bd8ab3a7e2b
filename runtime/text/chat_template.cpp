#include "runtime/text/chat_template.h"

#include <boost/json.hpp>
#include <filesystem>

#include "runtime/error.h"
#include "runtime/text/jinja/value.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text_file.h"

namespace strata {
namespace json = boost::json;

namespace {

// Meta-Llama-3-8B-Instruct's template (the revision with add_generation_prompt).
constexpr const char* kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
    "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

// ChatML as in the transformers documentation.
constexpr const char* kChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";

const char* const kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "pad_token"};

// tokenizer_config.json, or an empty object when there is none.
json::object read_config(const std::string& path) {
  if (path.empty() || !std::filesystem::exists(path)) return {};
  const std::string text = read_text_file(path);
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object())
    throw ModelError(path + ": invalid JSON" + (ec ? ": " + ec.message() : ""));
  return std::move(v.as_object());
}

// The special tokens HF passes to the template: strings, or AddedToken objects' "content".
json::object special_tokens_of(const json::object& config) {
  json::object out;
  for (const char* name : kSpecialTokens) {
    const auto* v = config.if_contains(name);
    if (!v) continue;
    if (v->is_string()) out[name] = *v;
    if (v->is_object())
      if (const auto* c = v->as_object().if_contains("content"); c && c->is_string())
        out[name] = *c;
  }
  return out;
}

// tokenizer_config.json's chat_template: the string, or the list form's "default" entry; ""
// if none.
std::string config_template(const json::object& config, const std::string& path) {
  const auto* t = config.if_contains("chat_template");
  if (!t || t->is_null()) return "";
  if (t->is_string()) return std::string(t->as_string());
  if (t->is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
    for (const auto& e : t->as_array()) {
      if (!e.is_object()) continue;
      const auto* n = e.as_object().if_contains("name");
      const auto* tt = e.as_object().if_contains("template");
      if (n && n->is_string() && n->as_string() == "default" && tt && tt->is_string())
        return std::string(tt->as_string());
    }
    throw ConfigError("model.chat_template",
                      path +
                          ": the chat_template list has no \"default\" entry; give a template "
                          "file (--chat-template FILE) or llama3 | chatml | none");
  }
  throw ModelError(path + ": chat_template is neither a string nor a list");
}

std::shared_ptr<const jinja::Template> parse_or_throw(const std::string& text,
                                                      const std::string& origin) {
  try {
    return std::make_shared<const jinja::Template>(jinja::Template::parse(text));
  } catch (const jinja::TemplateError& e) {
    throw ConfigError("model.chat_template",
                      origin + ": " + e.what() +
                          " (give another template with --chat-template FILE, or "
                          "llama3 | chatml | none)");
  }
}

// HF's continue_final_message: cut the rendering right after the final message's content.
std::string continue_final(std::string rendered, const std::string& final_content) {
  const std::string stripped = jinja::py_strip(final_content, true, true, nullptr);
  const std::string lstripped = jinja::py_strip(final_content, true, false, nullptr);
  const std::size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos)
    throw InvalidRequest("continue_final_message",
                         "the final message does not appear in the chat template's rendering "
                         "(the template changes it), so it cannot be continued");
  if (rendered.compare(loc, lstripped.size(), final_content) == 0)
    rendered.resize(std::min(rendered.size(), loc + lstripped.size()));
  else
    rendered.resize(loc + stripped.size());
  return rendered;
}

}  // namespace

const char* builtin_chat_template(const std::string& name) {
  if (name == "llama3") return kLlama3;
  if (name == "chatml") return kChatML;
  return nullptr;
}

std::shared_ptr<const ChatTemplate> ChatTemplate::from_text(const std::string& text,
                                                            json::object special_tokens,
                                                            const std::string& origin) {
  auto t = std::make_shared<ChatTemplate>();
  t->template_ = parse_or_throw(text, origin);
  t->special_tokens_ = std::move(special_tokens);
  t->origin_ = origin;
  return t;
}

std::shared_ptr<const ChatTemplate> ChatTemplate::load(
    const std::string& tokenizer_config_json_path, const std::string& setting) {
  const json::object config = read_config(tokenizer_config_json_path);
  json::object special = special_tokens_of(config);
  if (setting == "none") {
    auto t = std::make_shared<ChatTemplate>();
    t->special_tokens_ = std::move(special);
    t->origin_ = "none (model.chat_template)";
    return t;
  }
  if (const char* text = builtin_chat_template(setting))
    return from_text(text, std::move(special), "built-in " + setting);
  if (setting == "auto") {
    const auto dir = std::filesystem::path(tokenizer_config_json_path).parent_path();
    const auto jinja_file = dir / "chat_template.jinja";
    if (!tokenizer_config_json_path.empty() && std::filesystem::exists(jinja_file))
      return from_text(read_text_file(jinja_file.string()), std::move(special),
                       jinja_file.string());
    const std::string text = config_template(config, tokenizer_config_json_path);
    if (text.empty()) {
      auto t = std::make_shared<ChatTemplate>();
      t->special_tokens_ = std::move(special);
      t->origin_ = "none (the checkpoint has no chat_template)";
      return t;
    }
    return from_text(text, std::move(special), tokenizer_config_json_path);
  }
  // vLLM's --chat-template also takes the template itself, in one line.
  if (setting.find("{{") != std::string::npos || setting.find("{%") != std::string::npos)
    return from_text(setting, std::move(special), "model.chat_template (inline)");
  if (setting.empty() || !std::filesystem::is_regular_file(setting))
    throw ConfigError("model.chat_template",
                      "'" + setting +
                          "' is neither auto | llama3 | chatml | none nor a readable template "
                          "file");
  return from_text(read_text_file(setting), std::move(special), setting);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                 const ChatOptions& o) const {
  const jinja::Template* t = o.request_template ? o.request_template.get() : template_.get();
  if (!t)
    throw InvalidRequest("messages", "this model has no chat template (" + origin_ +
                                         "); send a plain prompt to /v1/completions, or start "
                                         "the server with --chat-template FILE");
  if (messages.empty()) throw InvalidRequest("messages", "at least one message is required");
  if (o.continue_final_message && o.add_generation_prompt)
    throw InvalidRequest("continue_final_message",
                         "continue_final_message cannot be combined with "
                         "add_generation_prompt=true");
  json::array msgs;
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role.empty())
      throw InvalidRequest("messages", "messages[" + std::to_string(i) + "].role is empty");
    msgs.push_back(json::object{{"role", messages[i].role}, {"content", messages[i].content}});
  }
  // What transformers passes: messages, tools, documents, add_generation_prompt, the
  // tokenizer's special tokens, then the caller's kwargs (which may override all but messages).
  json::object vars;
  vars["messages"] = std::move(msgs);
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = o.add_generation_prompt;
  for (const auto& kv : special_tokens_) vars[kv.key()] = kv.value();
  for (const auto& kv : o.kwargs) {
    if (kv.key() == "messages")
      throw InvalidRequest("chat_template_kwargs",
                           "'chat_template_kwargs' cannot set 'messages'; send them as messages");
    vars[kv.key()] = kv.value();
  }
  std::string text;
  try {
    jinja::RenderOptions ro;
    ro.now = o.now;
    text = t->render(vars, ro);
  } catch (const jinja::RenderError& e) {
    if (e.raised()) throw InvalidRequest("messages", e.what());  // the template's own check
    throw InvalidRequest("messages", "the chat template (" +
                                         (o.request_template ? "chat_template" : origin_) +
                                         ") failed: " + e.what());
  }
  if (o.continue_final_message) text = continue_final(std::move(text), messages.back().content);
  return text;
}

std::vector<std::int32_t> chat_prompt_ids(const ChatTemplate& t, const Tokenizer& tok,
                                          const std::vector<ChatMessage>& messages,
                                          const ChatOptions& options) {
  return tok.encode(t.render(messages, options), /*allow_special=*/true);
}

}  // namespace strata
