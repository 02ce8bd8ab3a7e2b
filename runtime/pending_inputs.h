// PendingInputs: resolves SeqStep::input_pending rows on the host from the previous step's
// results (runtime/step_plan.h, docs/contracts.md "Pipelined steps"). It is what a backend
// without device-side token feed uses: Backend's default submit(), the tests' deferring
// backend. A backend that feeds sampled tokens on the device does the same there.
//
// Threading: the backend's thread only. Plain header (std only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/step_plan.h"

namespace strata {

// The rule both resolvers share (PendingInputs here, cuda::PendingFeed on the device): `out`
// becomes a copy of `plan` in which each pending row i gets input token(i, v) and `output` =
// *output + token(i, v), where v is what `sampled` (sorted (seq_id, v)) holds for its sequence;
// `histories` holds those outputs (valid until the next call). false, `out` untouched, when no
// row is pending. InternalError when `sampled` has nothing for a pending row's sequence or the
// row is not a decode row with an output history.
bool resolve_pending_rows(const StepPlan& plan,
                          const std::vector<std::pair<std::uint64_t, std::int32_t>>& sampled,
                          StepPlan& out, std::vector<std::vector<std::int32_t>>& histories,
                          const std::function<std::int32_t(std::size_t, std::int32_t)>& token);

class PendingInputs {
 public:
  // `plan` itself when no row is pending; otherwise a copy held here (valid until the next
  // resolve()) in which each pending row's input is the token record() saw sampled for its
  // sequence and its `output` points to *output + that token. InternalError when the previous
  // step did not sample for such a sequence (or failed: forget()).
  const StepPlan& resolve(const StepPlan& plan);
  // The step just run (its plan as resolved or not) and its results: the tokens it sampled
  // are the next step's pending inputs. Replaces what was recorded before.
  void record(const StepPlan& plan, const StepResult& result);
  // The step failed: nothing is known for the next one.
  void forget() { sampled_.clear(); }

 private:
  std::vector<std::pair<std::uint64_t, std::int32_t>> sampled_;  // (seq_id, token), by seq_id
  StepPlan resolved_;
  std::vector<std::vector<std::int32_t>> histories_;  // the resolved rows' outputs
};

}  // namespace strata
