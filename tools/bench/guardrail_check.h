// The live quality guardrail against `strata eval` (issue 22, docs/quality.md "Guardrail vs
// eval"): the same quantity measured twice on the same document prompts.
//  - offline (offline_guardrail_agreement): each prompt is served greedily for N tokens with
//    the sparse profile through the backend's real path (one prefill step, then one decode step
//    per token, sampling on the backend), then prompt + output[0, N-1) is teacher-forced through
//    the full cache, and every output position is scored exactly as the guardrail scores a
//    replay (actors/quality.h score_replay_rows: the full cache's argmax after the request's
//    row processing against the sparse run's argmax, all N positions, the first one included)
//    and pooled into one QualityCell (the guardrail's per-version total and interval);
//  - live (live_guardrail_agreement): the prompts sent to a running `strata serve` with
//    quality_monitor.sample_rate = 1 as greedy completions (load_gen: token ids, temperature 0,
//    max_tokens = min_tokens = N, ignore_eos), one at a time, then /admin/api/quality polled
//    until every request is scored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/quality.h"
#include "runtime/backend.h"
#include "runtime/sparsity_profile.h"

namespace strata::bench {

// A prompt file: {"prompts": [[ids...], ...]} (plus whatever else the writer adds).
void write_prompts_json(const std::string& path,
                        const std::vector<std::vector<std::int32_t>>& prompts,
                        const std::string& note);
std::vector<std::vector<std::int32_t>> read_prompts_json(const std::string& path);

// The request both sides serve: greedy, exactly max_tokens tokens (load_gen's finish_body).
SamplingParams guardrail_params(int max_tokens);

// The guardrail's aggregate for the prompts (version and bucket unset: one pooled cell).
// `backend` must hold one prompt + max_tokens tokens of every layer from page 0
// (teacher_forcing_pages).
QualityCell offline_guardrail_agreement(Backend& backend,
                                        const std::vector<std::vector<std::int32_t>>& prompts,
                                        const SparsityProfile& profile, int max_tokens);

// What /admin/api/quality reports for one profile version.
struct LiveGuardrail {
  std::uint64_t version = 0, samples = 0, positions = 0;
  double agreement = 0.0;
  Interval interval;
  double delta_loglik = 0.0;
  std::uint64_t dropped = 0;  // replays.dropped (samples lost: then samples never reach n)
};
// Sends the prompts (one at a time) and waits up to timeout_s for every sample to be scored
// (admin_token: the server's, sent as a bearer token to /admin/api/quality).
// Throws std::runtime_error on a failed request, a dropped replay, more than one profile
// version or the timeout.
LiveGuardrail live_guardrail_agreement(const std::string& host, int port,
                                       const std::vector<std::vector<std::int32_t>>& prompts,
                                       int max_tokens, double timeout_s,
                                       const std::string& admin_token);

}  // namespace strata::bench
