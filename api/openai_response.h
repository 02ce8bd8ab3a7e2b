// OpenAI-compatible response shaping, pure (no I/O): turns the engine's StreamEvents into
// SSE chunks (`data: {json}\n\n` ... `data: [DONE]\n\n`) or one non-streaming JSON body,
// in the shape OpenAI and vLLM use (docs/api.md has transcripts).
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/request.h"
#include "api/api_error.h"
#include "api/openai_request.h"

namespace strata::api {

// Raw bytes of one token for logprobs (a byte-level token may be part of a UTF-8 sequence):
// "bytes" fields carry them as they are, "token" fields as valid UTF-8 (U+FFFD for the
// incomplete part, as vLLM); must not throw.
using TokenText = std::function<std::string(std::int32_t)>;

struct ResponseMeta {
  std::string id;  // "cmpl-…" / "chatcmpl-…"
  std::string model;
  std::int64_t created = 0;  // unix seconds
  Endpoint endpoint = Endpoint::kCompletions;
  int n = 1;
  bool include_usage = false;
  bool continuous_usage = false;
  bool logprobs = false;       // report logprobs (completions: `logprobs` given; chat: true)
  std::string echo_text;       // echo: prepended to choice text (chat: the final assistant message)
  bool tokens_as_ids = false;  // return_tokens_as_token_ids: logprob tokens as "token_id:N"
  // Batched prompts: choices per prompt and each prompt's echo (empty: echo_text for all).
  int n_per_prompt = 1;
  std::vector<std::string> echo_texts;
  const std::string& echo(int choice) const {
    return echo_texts.empty() ? echo_text
                              : echo_texts[static_cast<std::size_t>(choice / n_per_prompt)];
  }
  bool echo_logprobs = false;          // ParsedRequest::echo_logprobs
  bool prompt_logprobs_field = false;  // ParsedRequest::prompt_logprobs_field
};
ResponseMeta make_meta(const ParsedRequest& req, const std::string& id, std::int64_t created);

const char* finish_reason_name(FinishReason r);  // stop | length | abort | timeout | error

// SSE "data: <payload>\n\n".
std::string sse_data(const std::string& payload);
// The error event of a stream that already began, then [DONE].
std::string sse_error(const ApiError& e);

// Usage object; `extended` adds Strata's timings and compression ratio under "strata".
boost::json::object usage_json(const Usage& u, bool extended = true);

class StreamShaper {
 public:
  StreamShaper(ResponseMeta meta, TokenText token_text);
  // Chat: the role chunk of every choice; completions: the echo chunk if any.
  std::string begin();
  // Chunks for one event: a delta chunk when it carries text or logprobs, a finish chunk
  // when it finishes a choice, and an error event when it failed (sets failed()).
  std::string on_event(const StreamEvent& ev);
  // After the stream: the usage chunk (include_usage) and [DONE].
  std::string end();
  void set_prompt_tokens(int n) { prompt_tokens_hint_ = n; }  // usage before the engine's
  bool failed() const { return failed_; }
  const Usage& usage() const { return usage_; }
  int finished_choices() const { return finished_; }

 private:
  boost::json::object chunk() const;
  std::string prompt_chunk(const StreamEvent& ev);
  ResponseMeta meta_;
  TokenText token_text_;
  std::vector<int> text_offset_;  // per choice (completions logprobs)
  std::vector<int> tokens_;       // per choice
  Usage usage_;
  bool have_usage_ = false;
  bool failed_ = false;
  int finished_ = 0;
  int prompt_tokens_hint_ = 0;
};

// Non-streaming: collects every event, then builds the whole response.
class ResponseCollector {
 public:
  ResponseCollector(ResponseMeta meta, TokenText token_text);
  void add(const StreamEvent& ev);  // throws ApiError 500 when the event reports an error
  std::string body() const;         // the JSON response
  void set_prompt_tokens(int n) { prompt_tokens_hint_ = n; }
  const Usage& usage() const { return usage_; }

 private:
  struct Choice {
    std::string text;
    std::vector<TokenLogprob> prompt;  // prompt logprobs
    std::vector<TokenLogprob> logprobs;
    FinishReason finish = FinishReason::kNone;
    int tokens = 0;
  };
  ResponseMeta meta_;
  TokenText token_text_;
  std::vector<Choice> choices_;
  Usage usage_;
  bool have_usage_ = false;
  int prompt_tokens_hint_ = 0;
};

// The vocabulary string of a byte-level BPE token from its bytes (GPT-2's byte-to-unicode
// map: " hi" -> "\u0120hi"), as Hugging Face's convert_ids_to_tokens gives it.
std::string vocab_string(std::string_view bytes);

// Logprobs JSON of some tokens, in the endpoint's shape; `offset` advances (completions).
boost::json::value logprobs_json(Endpoint endpoint, const std::vector<TokenLogprob>& lps,
                                 const TokenText& token_text, int* text_offset,
                                 bool tokens_as_ids = false);

// The completions (legacy) logprobs object, built in pieces: echo + logprobs puts the prompt's
// entries (`prompt`: the first one's logprob and alternatives null, each token listed among its
// own alternatives, as OpenAI's legacy API and vLLM do) before the generated tokens'; text
// offsets count the shown tokens' bytes from 0 over both (vLLM).
struct CompletionLogprobs {
  boost::json::array tokens, token_logprobs, top_logprobs, offsets;
  boost::json::value json() const;
};
void append_completion_logprobs(CompletionLogprobs& c, const std::vector<TokenLogprob>& lps,
                                const TokenText& token_text, int* text_offset, bool tokens_as_ids,
                                bool prompt);

// vLLM's prompt_logprobs: [null, {"<id>": {"logprob", "rank", "decoded_token"}, ...}, ...], one
// entry per prompt token, each holding the top-N alternatives (ranks 1..N) and the token itself
// (its own rank).
boost::json::value prompt_logprobs_json(const std::vector<TokenLogprob>& lps,
                                        const TokenText& token_text, bool tokens_as_ids);

}  // namespace strata::api
