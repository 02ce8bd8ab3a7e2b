// A backend that does no math: for measuring the engine's host cost per step (`strata bench
// host`, docs/benchmarks.md "Host overhead") with a real model shape and real page counts.
// step() does what every backend must do with a plan on the host — read each sequence's
// tokens and page tables (checked against the pool, as backend.h's contract requires) — and
// returns a token for every sampled sequence at once; StepStats::device_ms is 0.
//
// Threading: backend.h's (one driving thread).
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/backend.h"
#include "runtime/model/model_config.h"

namespace strata::bench {

struct NullBackendOptions {
  ModelConfig model;          // shape; vocab_size bounds the input tokens
  int num_pages = 0;          // KV pool size in pages (>= 1)
  std::uint32_t seed = 1;     // sampled tokens: a hash of (seed, seq_id, position)
  std::int32_t token_lo = 0;  // sampled tokens lie in [token_lo, token_hi)
  std::int32_t token_hi = 0;  // 0: vocab_size
};

// Throws ConfigError on an empty shape, num_pages < 1 or an empty token range.
std::unique_ptr<Backend> make_null_backend(const NullBackendOptions& options);

}  // namespace strata::bench
