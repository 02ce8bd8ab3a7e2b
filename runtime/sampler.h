// The CPU sampler: one logits row -> one token, in exactly the order documented in
// runtime/sampling_params.h. It is the oracle for the CUDA sampling kernels, so every
// tie and threshold rule is deterministic (ties break toward the lower token id).
//
// Precision: softmax sums, the nucleus mass and the draw's cumulative sum are fp64.
// Cost for a vocabulary V: a few O(V) passes; top-k is a partial selection, top-p a weighted
// quickselect (O(V) expected) that sorts only the last few hundred candidates. Scratch
// buffers are per thread and reused, so a 128k row allocates nothing after the first call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling_params.h"
#include "runtime/step_plan.h"

namespace strata {

struct SampleOutput {
  std::int32_t token = -1;
  // Of `token`: log_softmax of the row after steps 1-2 (penalties), before temperature.
  // Always set, whatever p.logprobs asks (the quality guardrail records it for every token).
  float logprob = 0.0f;
  std::int32_t argmax = -1;     // of the same row (lowest id on ties): what greedy would pick
  std::vector<TopLogprob> top;  // p.logprobs > 0: the top-N alternatives, descending
};

// `logits` is one row [vocab]; on return it holds the row after logit_bias, min_tokens bans
// and the penalties (steps 1-2), i.e. what the logprobs are computed from. prompt/output:
// the token history for the penalties; output.size() is the index of the token drawn
// (sample_uniform(p.seed, output.size())) and the count checked against min_tokens.
// `eos_ids`: the EOS ids banned while min_tokens is not reached (the caller passes the
// model's EOS ids; it may pass none when the request ignores EOS).
//
// Throws InvalidRequest (param named as in the OpenAI API) on out-of-range parameters or a
// logit_bias id outside the vocabulary, InvalidRequest("logit_bias") when every token is
// banned, and InternalError on a NaN/+inf logit or a history id outside the vocabulary.
SampleOutput sample_row(std::span<float> logits, const SamplingParams& p,
                        const std::vector<std::int32_t>& prompt,
                        const std::vector<std::int32_t>& output,
                        const std::vector<std::int32_t>& eos_ids);

// The same row processing (steps 1-2) without the draw, for teacher forcing: the row's argmax
// and the log-probability of `token` (fp64), exactly as sample_row would record them after
// this history. The quality guardrail scores a full-cache replay with it. Throws as
// sample_row does, and InternalError when `token` is outside the vocabulary.
struct RowScore {
  std::int32_t argmax = -1;
  double logprob = 0.0;
};
RowScore score_row(std::span<float> logits, const SamplingParams& p,
                   const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& output,
                   const std::vector<std::int32_t>& eos_ids, std::int32_t token);

// One prompt position's score (prompt logprobs: the legacy API's echo + logprobs, vLLM's
// prompt_logprobs): log_softmax of the raw row — no logit_bias, bans, penalties or temperature,
// which shape what is sampled and not what the model says of a given text (vLLM's default,
// "raw_logprobs") — the partition summed from float exponentials into fp64 (logprob within ~1e-6
// of sample_row's all-fp64 sum). `rank` of `token`: 1 + the number of tokens with a
// strictly larger logit. `top`: the n_top largest, descending, ties toward the lower id.
// Throws InternalError on a NaN/+inf logit or a `token` outside the row.
struct PromptScore {
  float logprob = 0.0f;
  int rank = 0;
  std::vector<TopLogprob> top;
};
PromptScore score_prompt_row(std::span<const float> row, std::int32_t token, int n_top);

// The range checks sample_row applies, for intake to reject a request before queueing it.
// Throws InvalidRequest naming the parameter (temperature, top_p, top_k, min_p,
// repetition_penalty, logit_bias, logprobs, min_tokens, stop_token_ids).
void validate_sampling_params(const SamplingParams& p, int vocab_size);

}  // namespace strata
