// PendingInputs: resolves SeqStep::input_pending rows on the host from the previous step's
// results (runtime/step_plan.h, docs/contracts.md "Pipelined steps"). It is what a backend
// without device-side token feed uses: Backend's default submit(), the tests' deferring
// backend. A backend that feeds sampled tokens on the device does the same there.
//
// Threading: the backend's thread only. Plain header (std only).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/step_plan.h"

namespace strata {

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
