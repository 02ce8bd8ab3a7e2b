// The Engine facade: the library entry point the API server, `strata generate`, the
// benchmark and the evaluation tools use. It starts the actors (intake, batcher, cache,
// rank executors, admin) on an Asio io_context it owns. What it takes and returns lives apart:
// actors/request.h (Request, TokenStream, StreamEvent, Overloaded), actors/engine_stats.h
// (EngineStats), actors/backend_factory.h (BackendFactory), actors/prompt.h (the prompt assembly).
//
// Threading: every method is thread-safe and non-blocking (it posts to an actor's strand).
// A TokenStream is consumed by one client, from any thread or coroutine.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/backend_factory.h"
#include "actors/engine_stats.h"
#include "actors/prompt.h"
#include "actors/request.h"
#include "runtime/config.h"
#include "runtime/sparsity_profile.h"

namespace strata {

class Tokenizer;  // runtime/text/tokenizer.h

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
  // Publishes a new profile version (validated first: a bad profile, or one that enables
  // sparsity on a backend that cannot run sparse layers (BackendInfo::sparse_refusal), throws
  // ConfigError and changes nothing). Applies to requests admitted afterwards (and shrinks running ones when
  // cache.shrink_running). Returns the new version.
  virtual std::uint64_t update_sparsity(const SparsityProfile& profile) = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  virtual const ModelConfig& model() const = 0;
  virtual const Config& config() const = 0;
  // The prompt ids of `in`, exactly as submit() assembles them (assemble_prompt with the
  // engine's tokenizer and chat template; /tokenize uses it). Throws InvalidRequest. The
  // default has no chat template (messages: InvalidRequest "messages").
  virtual std::vector<std::int32_t> prompt_ids(PromptInput in) const;
  // Stops accepting, lets running requests finish until `grace`, then aborts the rest.
  virtual void shutdown(std::chrono::milliseconds grace) = 0;
};

}  // namespace strata
