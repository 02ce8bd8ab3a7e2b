#include "api/openai_request.h"

#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "api/sparsity_limits.h"
#include "runtime/error.h"

namespace strata::api {

namespace json = boost::json;

namespace {

const char* kind_of(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "an integer";
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value";
}

[[noreturn]] void wrong_type(const std::string& param, const char* want, const json::value& v) {
  throw bad_request(param, "'" + param + "' must be " + want + ", got " + kind_of(v));
}

double number(const json::value& v, const std::string& param) {
  if (v.is_int64()) return static_cast<double>(v.as_int64());
  if (v.is_uint64()) return static_cast<double>(v.as_uint64());
  if (v.is_double()) {
    if (!std::isfinite(v.as_double())) throw bad_request(param, "'" + param + "' must be finite");
    return v.as_double();
  }
  wrong_type(param, "a number", v);
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

double number_in(const json::value& v, const std::string& param, double lo, double hi) {
  const double x = number(v, param);
  if (!(x >= lo && x <= hi)) {
    throw bad_request(param, "'" + param + "' must be in [" + fmt(lo) + ", " + fmt(hi) + "], got " +
                                 json::serialize(v));
  }
  return x;
}

// Integers; an integral double (2.0) is accepted as pydantic does.
std::int64_t integer(const json::value& v, const std::string& param) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64()) {
    if (v.as_uint64() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw bad_request(param, "'" + param + "' is too large: " + json::serialize(v));
    return static_cast<std::int64_t>(v.as_uint64());
  }
  if (v.is_double()) {
    const double d = v.as_double();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15)
      return static_cast<std::int64_t>(d);
  }
  wrong_type(param, "an integer", v);
}

std::int64_t integer_in(const json::value& v, const std::string& param, std::int64_t lo,
                        std::int64_t hi, const std::string& why = {}) {
  const std::int64_t x = integer(v, param);
  if (x < lo || x > hi) {
    throw bad_request(param, "'" + param + "' must be in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "]" + why + ", got " + std::to_string(x));
  }
  return x;
}

bool boolean(const json::value& v, const std::string& param) {
  if (!v.is_bool()) wrong_type(param, "a boolean", v);
  return v.as_bool();
}

std::string string(const json::value& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return std::string(v.as_string());
}

std::int32_t token_id(const json::value& v, const std::string& param, int vocab_size) {
  const std::int64_t t = integer(v, param);
  if (t < 0 || t >= vocab_size) {
    throw bad_request(param, "token id " + std::to_string(t) + " in '" + param +
                                 "' is out of the vocabulary [0, " + std::to_string(vocab_size) +
                                 ")");
  }
  return static_cast<std::int32_t>(t);
}

std::vector<std::int32_t> token_ids(const json::value& v, const std::string& param,
                                    int vocab_size) {
  if (!v.is_array()) wrong_type(param, "an array of token ids", v);
  std::vector<std::int32_t> ids;
  ids.reserve(v.as_array().size());
  for (const auto& e : v.as_array()) ids.push_back(token_id(e, param, vocab_size));
  return ids;
}

bool all_integers(const json::array& a) {
  for (const auto& e : a)
    if (!e.is_int64() && !e.is_uint64()) return false;
  return true;
}

const json::value* find(const json::object& o, std::string_view key) {
  auto it = o.find(key);
  if (it == o.end() || it->value().is_null()) return nullptr;  // null == absent (OpenAI SDKs)
  return &it->value();
}

// OpenAI and vLLM fields that would change the output but are not implemented. Ignoring
// them like unknown fields would hand the client output that silently disregards what it
// asked for, so a request that uses one is refused naming it; the values that ask for
// nothing (an empty tool list, `"tool_choice": "none"`, `{"type": "text"}`, ...) pass.
void reject_unsupported(const json::object& o) {
  auto refuse = [](const char* param, const std::string& what) {
    throw bad_request(param, "'" + std::string(param) + "' is not supported: " + what);
  };
  auto empty_array = [](const json::value& v) { return v.is_array() && v.as_array().empty(); };
  for (const char* k : {"tools", "functions"})
    if (const auto* v = find(o, k); v && !empty_array(*v))
      refuse(k, "this server does not do tool or function calling");
  for (const char* k : {"tool_choice", "function_call"})
    if (const auto* v = find(o, k);
        v && !(v->is_string() && (v->as_string() == "none" || v->as_string() == "auto")))
      refuse(k, "this server does not do tool or function calling (only \"none\" or \"auto\")");
  if (const auto* v = find(o, "response_format")) {
    const json::value* t = v->is_object() ? find(v->as_object(), "type") : nullptr;
    if (!(t && t->is_string() && t->as_string() == "text"))
      refuse("response_format", "structured output is not implemented (only {\"type\": \"text\"})");
  }
  for (const char* k :
       {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs"})
    if (find(o, k)) refuse(k, "guided decoding is not implemented");
  if (const auto* v = find(o, "modalities")) {
    const bool text_only = v->is_array() && v->as_array().size() == 1 &&
                           v->as_array()[0].is_string() && v->as_array()[0].as_string() == "text";
    if (!text_only) refuse("modalities", "only [\"text\"]");
  }
  if (find(o, "audio")) refuse("audio", "audio output is not implemented");
  if (find(o, "prediction")) refuse("prediction", "predicted outputs are not implemented");
  if (const auto* v = find(o, "use_beam_search"); v && !(v->is_bool() && !v->as_bool()))
    refuse("use_beam_search", "beam search is not implemented");
  if (const auto* v = find(o, "include_stop_str_in_output"); v && !(v->is_bool() && !v->as_bool()))
    refuse("include_stop_str_in_output", "stop strings are never part of the returned text");
}

// One element of a prompt batch: a string, or a non-empty array of token ids.
PromptForm prompt_form(const json::value& e, const ParseContext& ctx) {
  PromptForm f;
  if (e.is_string()) {
    f.text = std::string(e.as_string());
  } else if (e.is_array() && !e.as_array().empty() && all_integers(e.as_array())) {
    f.ids = token_ids(e, "prompt", ctx.vocab_size);
  } else if (e.is_array() && e.as_array().empty()) {
    throw bad_request("prompt", "'prompt' must not be empty");
  } else {
    throw bad_request("prompt",
                      "a batch of prompts holds strings or arrays of token ids, one kind");
  }
  return f;
}

void parse_prompt(const json::value& v, Request& r, const ParseContext& ctx,
                  std::vector<PromptForm>* more) {
  if (v.is_string()) {
    r.prompt_text = std::string(v.as_string());
    return;
  }
  if (v.is_array()) {
    const auto& a = v.as_array();
    if (a.empty()) throw bad_request("prompt", "'prompt' must not be empty");
    if (all_integers(a)) {
      r.prompt_ids = token_ids(v, "prompt", ctx.vocab_size);
      return;
    }
    if (a[0].is_string() || a[0].is_array()) {  // a batch: ["text", ...] or [[ids], ...]
      if (a.size() > static_cast<std::size_t>(kMaxBatchPrompts))
        throw bad_request("prompt", "a batch holds at most " + std::to_string(kMaxBatchPrompts) +
                                        " prompts, got " + std::to_string(a.size()));
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].is_string() != a[0].is_string())
          throw bad_request("prompt",
                            "a batch of prompts holds strings or arrays of token ids, one kind");
        PromptForm f = prompt_form(a[i], ctx);
        if (i == 0) {
          r.prompt_text = std::move(f.text);
          r.prompt_ids = std::move(f.ids);
        } else {
          more->push_back(std::move(f));
        }
      }
      return;
    }
    throw bad_request("prompt", "'prompt' must be a string or an array of token ids");
  }
  wrong_type("prompt", "a string or an array of token ids", v);
}

std::vector<std::string> stop_strings(const json::value& v) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.emplace_back(v.as_string());
  } else if (v.is_array()) {
    for (const auto& e : v.as_array()) out.push_back(string(e, "stop"));
  } else {
    wrong_type("stop", "a string or an array of strings", v);
  }
  if (out.size() > 16) throw bad_request("stop", "at most 16 stop sequences are supported");
  for (const auto& s : out) {
    if (s.empty()) throw bad_request("stop", "stop sequences must not be empty");
    if (s.size() > 1024) throw bad_request("stop", "a stop sequence is longer than 1024 bytes");
  }
  return out;
}

}  // namespace

json::value parse_json_body(std::string_view body) {
  json::error_code ec;
  json::parse_options opt;
  opt.max_depth = 64;
  json::value v = json::parse(body, ec, {}, opt);
  if (ec) {
    throw ApiError(400, "invalid_request_error",
                   "invalid JSON in the request body: " + ec.message(), "", "invalid_json");
  }
  return v;
}

ChatOptions parse_chat_options(const json::object& o) {
  ChatOptions c;
  if (const auto* v = find(o, "add_generation_prompt"))
    c.add_generation_prompt = boolean(*v, "add_generation_prompt");
  if (const auto* v = find(o, "continue_final_message"))
    c.continue_final_message = boolean(*v, "continue_final_message");
  if (c.continue_final_message && c.add_generation_prompt)
    throw bad_request("continue_final_message",
                      "'continue_final_message' cannot be combined with 'add_generation_prompt' "
                      "(true by default): set \"add_generation_prompt\": false");
  if (const auto* v = find(o, "chat_template")) {
    try {
      c.request_template = parse_request_chat_template(string(*v, "chat_template"));
    } catch (const InvalidRequest& e) {
      throw bad_request("chat_template", e.what());
    }
  }
  if (const auto* v = find(o, "chat_template_kwargs")) {
    if (!v->is_object()) wrong_type("chat_template_kwargs", "an object", *v);
    if (v->as_object().contains("messages"))
      throw bad_request("chat_template_kwargs",
                        "'chat_template_kwargs' cannot set 'messages'; send them as messages");
    c.kwargs = v->as_object();
  }
  return c;
}

std::vector<ChatMessage> parse_messages(const json::value& v, const std::string& param) {
  if (!v.is_array()) wrong_type(param, "an array of messages", v);
  const auto& a = v.as_array();
  if (a.empty()) throw bad_request(param, "'" + param + "' must not be empty");
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string p = param + "[" + std::to_string(i) + "]";
    if (!a[i].is_object()) wrong_type(p, "an object", a[i]);
    const auto& m = a[i].as_object();
    ChatMessage msg;
    const auto* role = find(m, "role");
    if (!role) throw bad_request(p + ".role", "'" + p + ".role' is required");
    msg.role = string(*role, p + ".role");
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool" && msg.role != "developer") {
      throw bad_request(p + ".role", "'" + p +
                                         ".role' must be one of system, developer, user, "
                                         "assistant, tool; got '" +
                                         msg.role + "'");
    }
    if (msg.role == "developer") msg.role = "system";
    if (const auto* c = find(m, "content")) {
      if (c->is_string()) {
        msg.content = std::string(c->as_string());
      } else if (c->is_array()) {
        for (const auto& part : c->as_array()) {
          const std::string pp = p + ".content";
          if (!part.is_object()) wrong_type(pp, "a string or an array of text parts", part);
          const auto& po = part.as_object();
          const auto* type = find(po, "type");
          if (!type || !type->is_string() || type->as_string() != "text") {
            throw bad_request(pp, "only content parts of type 'text' are supported");
          }
          const auto* text = find(po, "text");
          if (!text) throw bad_request(pp, "a text content part needs 'text'");
          msg.content += string(*text, pp + ".text");
        }
      } else {
        wrong_type(p + ".content", "a string or an array of text parts", *c);
      }
    } else if (msg.role != "assistant") {
      throw bad_request(p + ".content", "'" + p + ".content' is required");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

ParsedRequest parse_openai_request(const json::value& body, Endpoint endpoint,
                                   const ParseContext& ctx, bool* has_seed) {
  if (!body.is_object()) throw bad_request("", "the request body must be a JSON object");
  const auto& o = body.as_object();
  ParsedRequest out;
  out.endpoint = endpoint;
  Request& r = out.request;
  SamplingParams& sp = r.params;
  const bool chat = endpoint == Endpoint::kChat;
  reject_unsupported(o);

  if (const auto* m = find(o, "model")) {
    out.model = string(*m, "model");
    if (!ctx.model_names.empty()) {
      bool known = false;
      for (const auto& n : ctx.model_names) known = known || n == out.model;
      if (!known) {
        const std::string shown =
            out.model.size() <= 64 ? out.model : out.model.substr(0, 64) + "...";
        throw model_not_found(shown, ctx.model_names.front());
      }
    }
  } else if (!ctx.model_names.empty()) {
    out.model = ctx.model_names.front();
  }

  if (chat) {
    const auto* m = find(o, "messages");
    if (!m) throw bad_request("messages", "'messages' is required");
    r.messages = parse_messages(*m, "messages");
    r.chat = parse_chat_options(o);
    if (find(o, "prompt"))
      throw bad_request("prompt", "chat completions take 'messages', not 'prompt'");
  } else {
    const auto* p = find(o, "prompt");
    if (!p) throw bad_request("prompt", "'prompt' is required");
    parse_prompt(*p, r, ctx, &out.more_prompts);
    if (find(o, "messages"))
      throw bad_request("messages", "completions take 'prompt', not 'messages'");
  }

  const int limit = ctx.max_model_len > 0 ? ctx.max_model_len : std::numeric_limits<int>::max();
  const std::string why = ctx.max_model_len > 0 ? " (the model's context is " +
                                                      std::to_string(ctx.max_model_len) + " tokens)"
                                                : std::string();
  const json::value* mt = find(o, "max_completion_tokens");
  std::string mt_name = "max_completion_tokens";
  if (!mt) {
    mt = find(o, "max_tokens");
    mt_name = "max_tokens";
  }
  // Chat without max_tokens: what remains of the context after the prompt (0, as vLLM);
  // the engine checks the prompt against the context, for text, ids and messages alike.
  if (mt) {
    sp.max_tokens = static_cast<int>(integer_in(*mt, mt_name, 1, limit, why));
  } else {
    sp.max_tokens = chat ? 0 : std::min(16, limit);
  }

  if (const auto* v = find(o, "temperature"))
    sp.temperature = static_cast<float>(number_in(*v, "temperature", 0.0, 100.0));
  if (const auto* v = find(o, "top_p")) {
    sp.top_p = static_cast<float>(number_in(*v, "top_p", 0.0, 1.0));
    if (sp.top_p <= 0.0f) throw bad_request("top_p", "'top_p' must be in (0, 1], got 0");
  }
  if (const auto* v = find(o, "top_k")) {
    sp.top_k = static_cast<int>(
        integer_in(*v, "top_k", -1, ctx.vocab_size > 0 ? ctx.vocab_size : (1 << 30)));
    if (sp.top_k < 0) sp.top_k = 0;
  }
  if (const auto* v = find(o, "min_p"))
    sp.min_p = static_cast<float>(number_in(*v, "min_p", 0.0, 1.0));
  if (const auto* v = find(o, "seed")) {
    sp.seed = static_cast<std::uint64_t>(integer(*v, "seed"));
    if (has_seed) *has_seed = true;
  } else {
    r.random_seed = true;  // intake draws one
    if (has_seed) *has_seed = false;
  }
  if (const auto* v = find(o, "presence_penalty"))
    sp.presence_penalty = static_cast<float>(number_in(*v, "presence_penalty", -2.0, 2.0));
  if (const auto* v = find(o, "frequency_penalty"))
    sp.frequency_penalty = static_cast<float>(number_in(*v, "frequency_penalty", -2.0, 2.0));
  if (const auto* v = find(o, "repetition_penalty")) {
    sp.repetition_penalty = static_cast<float>(number_in(*v, "repetition_penalty", 0.0, 10.0));
    if (sp.repetition_penalty <= 0.0f)
      throw bad_request("repetition_penalty", "'repetition_penalty' must be > 0");
  }
  if (const auto* v = find(o, "stop")) sp.stop = stop_strings(*v);
  if (const auto* v = find(o, "stop_token_ids"))
    sp.stop_token_ids = token_ids(*v, "stop_token_ids", ctx.vocab_size);
  if (const auto* v = find(o, "ignore_eos")) sp.ignore_eos = boolean(*v, "ignore_eos");
  if (const auto* v = find(o, "min_tokens")) {
    sp.min_tokens = static_cast<int>(integer_in(
        *v, "min_tokens", 0, sp.max_tokens > 0 ? sp.max_tokens : limit, " (at most max_tokens)"));
  }
  if (const auto* v = find(o, "n")) r.n = static_cast<int>(integer_in(*v, "n", 1, ctx.max_n));
  if (const auto* v = find(o, "best_of")) {
    if (integer(*v, "best_of") != r.n)
      throw bad_request("best_of", "'best_of' is supported only equal to 'n'");
  }
  if (const auto* v = find(o, "logit_bias")) {
    if (!v->is_object()) wrong_type("logit_bias", "an object mapping token ids to biases", *v);
    for (const auto& [k, b] : v->as_object()) {
      const std::string key(k);
      // Digits only (an optional '-'): stoll alone would take " 5" or "+5".
      const std::size_t digits = key.size() - (key.rfind('-', 0) == 0 ? 1 : 0);
      std::int64_t id = -1;
      std::size_t pos = 0;
      if (digits > 0 && digits < 12 &&
          key.find_first_not_of("0123456789", key.size() - digits) == std::string::npos)
        id = std::stoll(key, &pos);
      if (key.empty() || pos != key.size()) {
        throw bad_request("logit_bias", "'logit_bias' keys must be token ids, got '" + key + "'");
      }
      if (id < 0 || id >= ctx.vocab_size) {
        throw bad_request("logit_bias", "token id " + key +
                                            " in 'logit_bias' is out of the vocabulary [0, " +
                                            std::to_string(ctx.vocab_size) + ")");
      }
      const double bias = number_in(b, "logit_bias", -100.0, 100.0);
      sp.logit_bias.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(bias));
    }
  }
  if (chat) {
    if (const auto* v = find(o, "logprobs")) out.chat_logprobs = boolean(*v, "logprobs");
    if (const auto* v = find(o, "top_logprobs")) {
      out.top_logprobs = static_cast<int>(integer_in(*v, "top_logprobs", 0, ctx.max_logprobs));
      if (!out.chat_logprobs && out.top_logprobs > 0)
        throw bad_request("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    if (out.chat_logprobs) sp.logprobs = out.top_logprobs;
  } else {
    if (const auto* v = find(o, "logprobs")) {
      if (v->is_bool()) wrong_type("logprobs", "an integer (number of alternatives)", *v);
      out.top_logprobs = static_cast<int>(integer_in(*v, "logprobs", 0, ctx.max_logprobs));
      sp.logprobs = out.top_logprobs;
    }
    if (const auto* v = find(o, "suffix")) {
      if (!v->is_string() || !v->as_string().empty())
        throw bad_request("suffix", "'suffix' is not supported");
    }
  }
  if (const auto* v = find(o, "stream")) out.stream = boolean(*v, "stream");
  if (const auto* v = find(o, "stream_options")) {
    if (!v->is_object()) wrong_type("stream_options", "an object", *v);
    if (!out.stream) throw bad_request("stream_options", "'stream_options' needs 'stream': true");
    const auto& so = v->as_object();
    if (const auto* u = find(so, "include_usage"))
      out.include_usage = boolean(*u, "stream_options.include_usage");
    if (const auto* u = find(so, "continuous_usage_stats"))
      out.continuous_usage = boolean(*u, "stream_options.continuous_usage_stats");
  }
  if (const auto* v = find(o, "user")) (void)string(*v, "user");
  // vLLM's cache_salt: prefix-cache blocks are shared only between requests with the same salt.
  if (const auto* v = find(o, "cache_salt")) {
    r.cache_salt = string(*v, "cache_salt");
    if (r.cache_salt.empty())
      throw bad_request("cache_salt", "'cache_salt' must be a non-empty string if provided");
  }
  if (const auto* v = find(o, "kv_sparsity")) {
    if (ctx.sparsity_override == RequestOverride::kOff)
      throw bad_request("kv_sparsity",
                        "per-request 'kv_sparsity' is turned off on this server "
                        "(sparsity.request_override: off)");
    try {
      r.sparsity = parse_sparsity_json(*v, ctx.base_profile, "kv_sparsity");
      if (ctx.num_layers > 0) r.sparsity->resolve(ctx.num_layers);
      if (ctx.sparsity_override == RequestOverride::kWithinLimits)
        check_within_limits(*r.sparsity, ctx.base_profile, ctx.num_layers);
    } catch (const ConfigError& e) {
      // Field checks name keys "sparsity.<field>"; this request's field is kv_sparsity.<field>.
      std::string key = e.key(), msg = e.what();
      if (key.rfind("sparsity.", 0) == 0) key = "kv_" + key;
      if (msg.rfind("sparsity.", 0) == 0) msg = "kv_" + msg;
      throw bad_request(key, msg);
    }
  }
  // Output shaping (vLLM's extra fields).
  if (const auto* v = find(o, "echo")) out.echo = boolean(*v, "echo");
  // The legacy API answers echo + logprobs with the prompt tokens' logprobs too, at the head of
  // the choice's logprobs (what scoring harnesses read, e.g. lm-eval's loglikelihood requests).
  if (!chat && out.echo && sp.logprobs >= 0) {
    out.echo_logprobs = true;
    r.prompt_logprobs = sp.logprobs;
  }
  if (const auto* v = find(o, "skip_special_tokens"))
    r.skip_special_tokens = boolean(*v, "skip_special_tokens");
  // Accepted either way: like Hugging Face fast tokenizers (vLLM's default), Strata never pads
  // special tokens with spaces when it decodes them.
  if (const auto* v = find(o, "spaces_between_special_tokens"))
    (void)boolean(*v, "spaces_between_special_tokens");
  if (const auto* v = find(o, "return_tokens_as_token_ids"))
    out.tokens_as_ids = boolean(*v, "return_tokens_as_token_ids");
  // vLLM's prompt_logprobs: the prompt tokens' logprobs with their ranks and top-N, in a field
  // of their own.
  if (const auto* v = find(o, "prompt_logprobs")) {
    if (v->is_bool()) wrong_type("prompt_logprobs", "an integer (number of alternatives)", *v);
    const auto k = static_cast<int>(integer_in(*v, "prompt_logprobs", 0, ctx.max_logprobs));
    out.prompt_logprobs_field = true;
    r.prompt_logprobs = std::max(r.prompt_logprobs, k);
  }
  if (const auto* v = find(o, "truncate_prompt_tokens")) {
    const auto k = integer_in(*v, "truncate_prompt_tokens", -1, limit, why);
    if (k == 0)
      throw bad_request("truncate_prompt_tokens", "'truncate_prompt_tokens' must not be 0");
    r.truncate_prompt_tokens = static_cast<int>(k < 0 ? limit : k);  // -1: the context
  }
  if (const auto* v = find(o, "request_id")) r.id = string(*v, "request_id");
  if (r.id.size() > 128) throw bad_request("request_id", "'request_id' is longer than 128 bytes");
  return out;
}

TokenizeRequest parse_tokenize_request(const json::value& body) {
  if (!body.is_object()) throw bad_request("", "the request body must be a JSON object");
  const auto& o = body.as_object();
  TokenizeRequest t;
  const auto* p = find(o, "prompt");
  const auto* m = find(o, "messages");
  if (p && m) throw bad_request("prompt", "give either 'prompt' or 'messages', not both");
  if (p) {
    t.prompt = string(*p, "prompt");
  } else if (m) {
    t.messages = parse_messages(*m, "messages");
    t.chat = parse_chat_options(o);
  } else {
    throw bad_request("prompt", "'prompt' (or 'messages') is required");
  }
  if (const auto* v = find(o, "add_special_tokens"))
    t.add_special_tokens = boolean(*v, "add_special_tokens");
  if (const auto* v = find(o, "model")) t.model = string(*v, "model");
  if (const auto* v = find(o, "return_token_strs"))
    t.return_token_strs = boolean(*v, "return_token_strs");
  return t;
}

std::vector<std::int32_t> parse_detokenize_request(const json::value& body, int vocab_size) {
  if (!body.is_object()) throw bad_request("", "the request body must be a JSON object");
  const auto* t = find(body.as_object(), "tokens");
  if (!t) throw bad_request("tokens", "'tokens' is required");
  return token_ids(*t, "tokens", vocab_size);
}

}  // namespace strata::api
