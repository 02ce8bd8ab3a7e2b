// Per-request sampling parameters and the sampling contract every backend implements the
// same way (the CPU sampler in runtime/sampler.h is the oracle for the CUDA kernels).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strata {

struct SamplingParams {
  // Order applied to one logits row (all backends):
  //  1. logit_bias added; tokens banned by min_tokens set to -inf (EOS ids + stop_token_ids
  //     while fewer than min_tokens tokens were generated);
  //  2. repetition_penalty (HF/vLLM: over prompt and output tokens; logit>0 divided, else
  //     multiplied), then frequency/presence penalties over output tokens
  //     (logit -= frequency * count + presence * (count > 0));
  //  3. logprobs are reported from log_softmax of the row after step 2 (before temperature);
  //  4. temperature == 0: greedy (argmax, lowest id on ties). Otherwise divide by
  //     temperature, softmax, then top_k, top_p (smallest set, in descending probability,
  //     whose mass >= top_p times the mass top_k kept, i.e. over the renormalised top-k as
  //     HF/vLLM do; ties by lower id), min_p (drop p < min_p * p_max);
  //  5. draw u = sample_uniform(seed, output_index) and return the first token in vocabulary
  //     order whose cumulative kept probability exceeds u * kept_mass.
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;  // 0 or -1: disabled
  float min_p = 0.0f;
  std::uint64_t seed = 0;  // always set by intake (random when the request gives none)
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  int logprobs = -1;  // -1: none; N >= 0: the chosen token's logprob plus top-N alternatives
  std::vector<std::int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings: handled by the engine, not the backend
  int max_tokens = 16;
  int min_tokens = 0;
  bool ignore_eos = false;
};

// Stateless per-token randomness: same (seed, index) -> same draw on every backend, so
// seeded runs reproduce across batching, preemption and devices. Returns u in [0, 1).
inline constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline constexpr double sample_uniform(std::uint64_t seed, std::uint64_t output_index) {
  return static_cast<double>(splitmix64(splitmix64(seed) ^ output_index) >> 11) * 0x1.0p-53;
}

}  // namespace strata
