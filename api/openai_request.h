// OpenAI-compatible request parsing: JSON body -> strata::Request (+ the response options
// the server needs). Pure functions (no engine, no I/O) so they are unit-tested and fuzzed
// (tests/api/openai_request_test.cpp, tests/api/fuzz_request.cpp). Every rejection throws
// ApiError (400) naming the parameter; nothing is half-applied.
#pragma once

#include <boost/json/value.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.h"
#include "api/api_error.h"
#include "runtime/config.h"

namespace strata::api {

enum class Endpoint : std::uint8_t { kCompletions, kChat };

// A completions prompt: text (BOS per model config) or token ids (used verbatim).
struct PromptForm {
  std::optional<std::string> text;
  std::optional<std::vector<std::int32_t>> ids;
};
// The most prompts one completions request may batch.
inline constexpr int kMaxBatchPrompts = 256;

// What the parser needs to know about the served model.
struct ParseContext {
  std::vector<std::string> model_names;  // accepted `model` values (empty: any)
  int vocab_size = 0;                    // token ids must be in [0, vocab_size)
  int max_model_len = 0;                 // context limit (prompt + completion), tokens
  SparsityProfile base_profile;          // kv_sparsity overrides merge over it
  int max_n = 16;                        // cap on `n`
  int max_logprobs = 20;                 // cap on logprobs / top_logprobs
  int num_layers = 0;                    // model depth: kv_sparsity is resolved for it (0: not)
  RequestOverride sparsity_override = RequestOverride::kWithinLimits;  // sparsity.request_override
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  Request request;
  std::string model;  // echoed back in responses
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (vLLM)
  bool chat_logprobs = false;     // chat: `logprobs: true`
  int top_logprobs = 0;           // alternatives per token (both endpoints)
  bool echo = false;              // prepend the prompt (chat: a final assistant message)
  bool tokens_as_ids = false;     // return_tokens_as_token_ids
  // Prompt logprobs (Request::prompt_logprobs): completions' echo + logprobs (the prompt tokens
  // head the choice's logprobs, the first one's logprob null), and/or vLLM's prompt_logprobs
  // field (completions: per choice; chat: on the response).
  bool echo_logprobs = false;
  bool prompt_logprobs_field = false;
  // Batched completions prompts (`prompt: ["a", "b"]`, `[[ids], [ids]]`) after the first, which
  // is `request`'s own: each runs as a request of its own with the same parameters, its choices
  // numbered after the previous prompt's (api/batch_stream.h).
  std::vector<PromptForm> more_prompts;
};

// Parses a body into JSON; throws ApiError 400 ("invalid JSON: ...") on malformed input.
boost::json::value parse_json_body(std::string_view body);

// Validates and converts a /v1/completions or /v1/chat/completions body. The seed is left
// 0 when absent: callers draw a random one (`has_seed` says which).
ParsedRequest parse_openai_request(const boost::json::value& body, Endpoint endpoint,
                                   const ParseContext& ctx, bool* has_seed = nullptr);

// POST /tokenize: {"prompt": str | "messages": [...], "add_special_tokens": bool} and, with
// messages, the chat template fields (parse_chat_options).
struct TokenizeRequest {
  std::string prompt;
  std::vector<ChatMessage> messages;  // non-empty: chat form
  bool add_special_tokens = true;
  ChatOptions chat;   // chat form: add_generation_prompt, continue_final_message, chat_template...
  std::string model;  // checked against the served name when given
  bool return_token_strs = false;  // also the tokens' vocabulary strings (vLLM)
};
TokenizeRequest parse_tokenize_request(const boost::json::value& body);

// POST /detokenize: {"tokens": [int...]} (ids checked against the vocabulary).
std::vector<std::int32_t> parse_detokenize_request(const boost::json::value& body, int vocab_size);

// The chat template fields of a chat or /tokenize request, with vLLM's names and defaults:
// add_generation_prompt (true), continue_final_message (false; needs add_generation_prompt
// false), chat_template (a template text, parsed here: 400 with its line when it does not),
// chat_template_kwargs (an object of extra template variables; not `messages`).
ChatOptions parse_chat_options(const boost::json::object& body);

// Chat messages: [{role, content: str | [{type:"text", text}]}]; `param` names the field.
std::vector<ChatMessage> parse_messages(const boost::json::value& v, const std::string& param);

}  // namespace strata::api
