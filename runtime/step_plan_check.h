// The one validator of the StepPlan contract and the one state rule of a layer (issue 15;
// docs/contracts.md "Checking a plan"). Every backend checks a plan with StepPlanChecker
// before it touches memory; the backends and the cache manager advance a layer's slots with
// advance_layer(), so their copies agree without messages.
//
// Error types, one per violation (docs/contracts.md has the table):
//   InvalidRequest("prompt")  the plan's content came from a request: an input token outside
//                             the vocabulary, a sequence longer than the backend's positions.
//                             (Intake rejects both first; a backend still names them so.)
//   InternalError             everything else: the plan can only be wrong through an engine
//                             bug (layer count, token count, page ids, tables, valid slots,
//                             ring positions, sparse rules, actions, pages written twice,
//                             step sizes, sampling without params).
// Plain header (std only): compiles in host and CUDA translation units.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/step_plan.h"

namespace strata {

// What a backend can run. Zero means "no limit" for the max_* fields.
struct StepPlanLimits {
  int num_layers = 0;     // model layers: every SeqStep carries this many LayerSlots
  int vocab_size = 0;     // input tokens lie in [0, vocab_size)
  int num_pages = 0;      // page ids lie in [0, num_pages)
  int max_seqs = 0;       // sequences per step
  int max_tokens = 0;     // input tokens per step, summed over the sequences
  int max_positions = 0;  // positions per sequence: start + tokens.size() <= max_positions
};

// Checks plans against the contract of docs/contracts.md. Keeps a generation-stamped mark
// per page (no allocation per step) to find a page written by two tables of one step, so
// one checker serves one backend (one thread, like the backend itself).
class StepPlanChecker {
 public:
  explicit StepPlanChecker(const StepPlanLimits& limits);
  const StepPlanLimits& limits() const { return limits_; }
  // Returns when the plan keeps the contract; throws InvalidRequest or InternalError (see
  // the top of this file) naming the sequence (index and id) and layer otherwise. An empty
  // plan is valid.
  void check(const StepPlan& plan);

 private:
  void mark(const std::vector<std::int32_t>& pages, std::size_t first, std::size_t last,
            std::size_t seq, std::uint64_t seq_id, std::size_t layer);

  StepPlanLimits limits_;
  std::vector<std::uint32_t> page_mark_;  // [num_pages] generation that last wrote the page
  std::uint32_t generation_ = 0;
};

// A one-off check (tests, tools): StepPlanChecker(limits).check(plan).
void validate_step_plan(const StepPlan& plan, const StepPlanLimits& limits);

// ---- The state rule --------------------------------------------------------------------

// What one step does to one layer of one sequence.
struct LayerStep {
  std::int32_t n = 0;           // input tokens of the step (1 for a decode)
  bool prefill = true;          // a prefill chunk (else one decode token)
  std::int32_t prompt_len = 0;  // the SeqStep's prompt_len
  bool select = false;          // LayerAction::kSelect
  std::int32_t shrink_to = 0;   // LayerAction::kShrink to this many slots; 0: no shrink
};
// The LayerStep of layer `ls` (one of s.layers) in step `s`.
LayerStep layer_step(const SeqStep& s, const LayerSlots& ls);

// The state rule. Advances `ls` in place from its state before the step to its state after:
//   decode                         advance_decode()
//   prefill, direct_prefill()      valid += n
//   prefill, select                valid = rule.capacity, ring_pos = 0 (the selection)
//   prefill, otherwise             unchanged (the prompt's K/V sit in temp pages)
// then, with shrink_to > 0 (advance_layer only):
//   valid = min(valid, shrink_to), ring_pos = 0 (the ring re-laid oldest first),
//   rule.capacity = shrink_to, rule.ring = shrink_to - sinks for `window` (else unchanged).
// Only valid, ring_pos and (on a shrink) the rule change: the page tables, temp pages,
// action and shrink_to are left as they are (the cache manager frees pages itself).
void advance_layer(LayerSlots& ls, const LayerStep& step);
// The first half only: the state a kShrink compacts (after the step's own work).
void advance_layer_before_shrink(LayerSlots& ls, const LayerStep& step);

}  // namespace strata
