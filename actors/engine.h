// The Engine facade: the library entry point the API server, `strata generate`, the
// benchmark and the evaluation tools use. It starts the actors (intake, batcher, cache,
// rank executors, admin) on an Asio io_context it owns.
//
// Threading: every method is thread-safe and non-blocking (it posts to an actor's strand).
// A TokenStream is consumed by one client, from any thread or coroutine.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/chat_message.h"
#include "runtime/chat_template.h"
#include "runtime/config.h"
#include "runtime/sampling_params.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata {

class Tokenizer;  // runtime/tokenizer.h

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
};

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  double queue_ms = 0, ttft_ms = 0, e2e_ms = 0, mean_itl_ms = 0;
  double compression_ratio = 1.0;  // full-cache KV bytes / bytes held at the end, this request
};

// One event of a request's stream. Text deltas are UTF-8 safe and never contain a stop
// string; the last event of each choice carries `finish` (and `usage` once per request,
// on the event that ends the last choice).
struct StreamEvent {
  int index = 0;                        // choice index, 0 .. n-1
  std::string text;                     // delta
  std::vector<std::int32_t> token_ids;  // tokens of this delta
  std::vector<TokenLogprob> logprobs;   // per token, when params.logprobs >= 0
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

// Where the step loop's wall time goes, cumulative since start (ms; rank 0's view). A step
// runs schedule -> plan -> dispatch -> backend -> return -> finish; the host overhead is
// everything but device_ms (docs/actors.md "Host overhead").
struct StepTimings {
  std::uint64_t steps = 0;       // steps counted below
  double schedule_ms = 0.0;      // batcher -> cache actor -> batcher: commit, release, schedule
  double schedule_job_ms = 0.0;  // of which the job on the cache strand (page tables included)
  double plan_ms = 0.0;      // bookkeeping of the schedule, stats publication, StepPlan assembly
  double dispatch_ms = 0.0;  // plan handed to the rank executors -> Backend::step starts
  double backend_ms = 0.0;   // Backend::step wall time (device and the backend's host work)
  double device_ms = 0.0;    // StepStats::device_ms
  double return_ms = 0.0;    // Backend::step returned -> the batcher handles the completion
  double finish_ms = 0.0;    // tokens appended, detokenized, stops checked, events streamed
  double wall_ms = 0.0;      // schedule start -> completion handled
};

struct EngineStats {
  int running = 0, waiting = 0, preempted = 0;
  std::uint64_t steps = 0, preemptions = 0;
  std::uint64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  std::uint64_t requests_finished = 0, requests_refused = 0, requests_aborted = 0;
  int pages_total = 0, pages_used = 0;
  std::vector<int> pages_per_layer;  // pages held per layer
  double kv_usage = 0.0;             // pages_used / pages_total
  double compression_ratio = 1.0;    // global: full-cache bytes / bytes held (running sequences)
  double mean_batch = 0.0;           // mean sequences per step since start
  double host_overhead = 0.0;        // share of step wall time not covered by backend work
  std::uint64_t profile_version = 0;
  SparsityProfile profile;
  StepTimings timings;
};

// Makes the backends, one per tensor-parallel rank (rank 0 first). tools/ passes the CUDA
// factory when built with CUDA; an empty factory means the CPU reference backend.
using BackendFactory = std::function<std::vector<std::unique_ptr<Backend>>(const Config&)>;

class Engine {
 public:
  // Loads the model (blocking) and starts the actors. Throws ConfigError / ModelError.
  static std::unique_ptr<Engine> create(const Config& config, BackendFactory factory = {});
  virtual ~Engine() = default;

  // Validates, tokenizes and queues a request. Throws InvalidRequest (bad input, prompt
  // over the context limit: nothing queued) or Overloaded (waiting queue full).
  virtual std::shared_ptr<TokenStream> submit(Request request) = 0;
  // Aborts a request; its pages are free within one step. Unknown ids are ignored.
  virtual void abort(const std::string& request_id) = 0;
  virtual EngineStats stats() const = 0;
  // Publishes a new profile version (validated first: a bad profile throws ConfigError and
  // changes nothing). Applies to requests admitted afterwards (and shrinks running ones when
  // cache.shrink_running). Returns the new version.
  virtual std::uint64_t update_sparsity(const SparsityProfile& profile) = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual const ModelConfig& model() const = 0;
  virtual const Config& config() const = 0;
  // The prompt ids of a chat conversation, exactly as submit() assembles them (/tokenize uses
  // it). Throws InvalidRequest.
  virtual std::vector<std::int32_t> chat_prompt(const std::vector<ChatMessage>& messages,
                                                const ChatOptions& options) const;
  // Stops accepting, lets running requests finish until `grace`, then aborts the rest.
  virtual void shutdown(std::chrono::milliseconds grace) = 0;
};

// Thrown by submit() when the waiting queue is full (HTTP 429).
class Overloaded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace strata
