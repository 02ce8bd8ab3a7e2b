// What a client sends the engine and what it gets back: the Request, the TokenStream of its
// StreamEvents and their parts (finish reasons, log-probabilities, usage), and Overloaded, the
// refusal of a full queue. The Engine facade (actors/engine.h) takes and returns them; the
// actors pass them along.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/sampling_params.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"
#include "runtime/text/chat_message.h"
#include "runtime/text/chat_template.h"

namespace strata {

struct Request {
  std::string id;  // assigned by intake when empty ("cmpl-…")
  // Exactly one prompt form.
  std::optional<std::string> prompt_text;               // completions: text (BOS per model config)
  std::optional<std::vector<std::int32_t>> prompt_ids;  // completions: token ids, used verbatim
  std::optional<std::vector<ChatMessage>> messages;     // chat: formatted with the chat template
  ChatOptions chat;          // with messages: add_generation_prompt, chat_template(_kwargs), ...
  SamplingParams params;     // max_tokens 0: what remains of the context after the prompt
  bool random_seed = false;  // true: the request gave no seed; intake draws one into params.seed
  int n = 1;                 // independent choices
  std::optional<SparsityProfile> sparsity;  // per-request override (kv_sparsity)
  std::optional<std::chrono::steady_clock::time_point> deadline;  // default: config timeout
  // Output text leaves special tokens (<|eot_id|>, ...) out; their ids are still reported.
  bool skip_special_tokens = true;
  // Keep only the last N >= 1 prompt tokens, counted after tokenizing (vLLM).
  std::optional<int> truncate_prompt_tokens;
  // Prefix-cache isolation (vLLM's cache_salt): requests share cached prompt blocks only
  // with requests of the same salt (none shares with none).
  std::string cache_salt;
  // Prompt logprobs (the legacy API's echo + logprobs, vLLM's prompt_logprobs): -1 none; N >= 0:
  // every prompt token's logprob given the tokens before it, its rank and the top-N
  // alternatives (runtime/sampler.h score_prompt_row: the raw row, before any sampling
  // parameter). Each choice scores its own prefill; such a request takes nothing from the
  // prefix cache (a cached block is never computed, so its positions could not be scored).
  int prompt_logprobs = -1;
};

enum class FinishReason : std::uint8_t { kNone, kStop, kLength, kAbort, kError, kTimeout };
// "stop", "length", "abort", "error", "timeout" (inline: header-only users such as the fuzz
// target link without engine.cpp).
constexpr const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
    case FinishReason::kTimeout:
      return "timeout";
  }
  return "none";
}

struct TokenLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
  int rank = 0;  // prompt logprobs: 1-based rank of `token` in its row (0: not reported)
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  double queue_ms = 0, ttft_ms = 0, e2e_ms = 0, mean_itl_ms = 0;
  double compression_ratio = 1.0;  // full-cache KV bytes / bytes held at the end, this request
  // vLLM's request phases: prefill = first scheduled -> first token, decode = first -> last
  // token (over the choices), inference = first scheduled -> last token (0 when none).
  double prefill_ms = 0, decode_ms = 0, inference_ms = 0;
  int max_tokens = 0;  // the request's max_tokens (after intake's default)
  // Prompt tokens whose K/V came from the prefix cache (OpenAI's
  // usage.prompt_tokens_details.cached_tokens; the first admission of the request's choices).
  int cached_tokens = 0;
};

// One event of a request's stream. Text deltas are UTF-8 safe and never contain a stop
// string; the last event of each choice carries `finish` (and `usage` once per request,
// on the event that ends the last choice).
struct StreamEvent {
  int index = 0;                        // choice index, 0 .. n-1
  std::string text;                     // delta
  std::vector<std::int32_t> token_ids;  // tokens of this delta
  std::vector<TokenLogprob> logprobs;   // per token, when params.logprobs >= 0
  // Request::prompt_logprobs >= 0: once per choice, on an event of its own before the choice's
  // first token, one entry per prompt token; entry 0 (nothing precedes it) has no logprob: only
  // its token is set.
  std::vector<TokenLogprob> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::optional<Usage> usage;
  std::string error;  // finish == kError: what went wrong
};

class TokenStream {
 public:
  virtual ~TokenStream() = default;
  const std::string& id() const { return id_; }
  int prompt_tokens() const { return prompt_tokens_; }
  // Next event; nullopt once every choice has finished (or after abort()).
  virtual boost::asio::awaitable<std::optional<StreamEvent>> next() = 0;
  virtual std::optional<StreamEvent> next_blocking() = 0;  // for non-coroutine callers

 protected:
  std::string id_;
  int prompt_tokens_ = 0;
};

// Thrown by Engine::submit() when the waiting queue is full (HTTP 429).
class Overloaded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace strata
