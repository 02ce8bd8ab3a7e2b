// IntakeActor: turns a client Request into a PreparedRequest the batcher can queue —
// validation (one prompt form, sampling ranges, token ids in the vocabulary, per-request
// sparsity, the context limit), the chat template, tokenization, the request id and the seed.
// Bad input throws InvalidRequest naming the parameter; nothing is queued.
//
// It holds no mutable state but an atomic id counter, so it needs no strand: prepare() runs on
// the caller's thread (that is what lets Engine::submit throw synchronously, and it spreads
// tokenization over the callers' threads instead of serializing it behind one strand).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "actors/batcher_actor.h"
#include "runtime/text/chat_template.h"
#include "runtime/text/tokenizer.h"

namespace strata::actors {

struct IntakeSettings {
  const Tokenizer* tokenizer = nullptr;
  ModelConfig model;
  std::shared_ptr<const ChatTemplate> chat;  // never null (available() may be false)
  std::int64_t max_model_len = 0;            // resolved (> 0)
  double request_timeout_s = 0;              // 0: no default deadline
  int max_n = 16;
};

class IntakeActor {
 public:
  explicit IntakeActor(IntakeSettings s) : s_(std::move(s)) {}
  // Thread-safe. Throws InvalidRequest. The result has no sink yet.
  std::shared_ptr<PreparedRequest> prepare(Request r) const;
  const IntakeSettings& settings() const { return s_; }

 private:
  IntakeSettings s_;
  mutable std::atomic<std::uint64_t> next_id_{1};
};

}  // namespace strata::actors
