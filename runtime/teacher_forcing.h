// Teacher forcing: the logits a backend gives at every position of a fixed token sequence.
// Builds the StepPlans itself (no cache manager): one sequence, distinct pages per layer
// starting at page 0, per-layer rules from a SparsityProfile. Used by `strata logits`, the
// HF comparison harness and GPU tools; `strata generate --force-ids` can reuse it.
//
// Schedule of steps for N ids with prefill_len P (0 < P <= N; P = N by default):
//   step 0: prefill of ids[0, P) (return_logits); sparse layers whose rule capacity C < P
//           write the prompt into temp pages and carry LayerAction::kSelect;
//   steps 1 .. N-P: one decode step per remaining id (return_logits), with the per-layer
//           state advanced exactly as the cache manager does (LayerSlots::advance_decode).
// So with P = N sparsity cannot change any logit (a prefill attends over the whole prompt);
// with P < N the decode positions see the sparse KV — a teacher-forced quality measure.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/backend.h"
#include "runtime/model/model_config.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata {

// Pages the schedule above uses (all layers, temp pages included): size a backend's pool
// with at least this many.
int teacher_forcing_pages(const ModelConfig& model, int num_ids, const SparsityProfile& profile,
                          int prefill_len = 0);

// The step plans, in order (step_id 0, 1, ...). Throws InvalidRequest("ids") on an empty
// sequence, an id outside [0, vocab) or prefill_len outside [0, N] (0 means N), and
// ConfigError from SparsityProfile::resolve.
std::vector<StepPlan> teacher_forcing_plans(const ModelConfig& model,
                                            const std::vector<std::int32_t>& ids,
                                            const SparsityProfile& profile, int prefill_len = 0);

// Runs the plans on `backend` and returns fp32 logits [N][vocab], row i = the logits after
// ids[0..i]. Throws ConfigError("cache.cpu_kv_bytes") when the backend's pool is smaller
// than teacher_forcing_pages(), InternalError when the backend returns a wrongly sized row.
std::vector<float> teacher_forced_logits(Backend& backend, const std::vector<std::int32_t>& ids,
                                         const SparsityProfile& profile, int prefill_len = 0);

}  // namespace strata
