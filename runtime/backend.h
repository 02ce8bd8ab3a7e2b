// The Backend interface: the only way the engine reaches a device (CPU reference, CUDA,
// CUDA tensor-parallel). A backend owns the weights, the KV page storage (num_pages pages
// of KvLayout each, plus the per-slot scores of sparse layers) and its scratch memory.
//
// Threading: a backend is driven by exactly one thread (its RankExecutor); step() blocks
// until the step's results are on the host.
#pragma once

#include <deque>
#include <memory>
#include <string>

#include "runtime/kv_layout.h"
#include "runtime/model/model_config.h"
#include "runtime/pending_inputs.h"
#include "runtime/step_plan.h"

namespace strata {

struct BackendInfo {
  std::string name;   // "cpu", "cuda", "cuda-tp2"
  KvLayout layout;    // per-rank layout of one page
  int num_pages = 0;  // pages in the pool (page ids 0 .. num_pages-1)
  int tp_size = 1;
  std::size_t weight_bytes = 0;  // per rank
  // Why this backend cannot run sparse layers; empty when it can. The engine refuses a profile
  // that enables sparsity (Engine::update_sparsity, the admin API) with this text rather than
  // publish one whose steps would fail. No backend sets it today (the CUDA backend's fp8 KV cache
  // did until its sparse kernels on e4m3 pages passed on the H200, 2026-12-02).
  std::string sparse_refusal;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const BackendInfo& info() const = 0;
  virtual const ModelConfig& model() const = 0;
  // Runs one step. The plan is checked first with StepPlanChecker (runtime/step_plan_check.h:
  // page ids < num_pages, tables cover every slot written, no page written twice, ...;
  // InvalidRequest for an out-of-vocabulary token, InternalError for engine bugs).
  // Results come back in plan order.
  virtual StepResult step(const StepPlan& plan) = 0;

  // ---- pipelined steps (scheduler.async_steps; docs/contracts.md "Pipelined steps") --------
  // submit() hands a step over and may return before it ran; collect() returns the results of
  // the oldest submitted step not collected yet (FIFO), blocking until they are on the host.
  // The engine keeps at most two steps submitted and plans the next one while the previous
  // runs. Contract:
  //  - the plan and everything its SeqSteps point to stay alive and unchanged until the
  //    collect() that returns its results has returned;
  //  - steps run in submission order: a page freed and reused by a later plan is written by it
  //    after every earlier step is done with it;
  //  - a row with SeqStep::input_pending takes as input the token this backend sampled for its
  //    seq_id in the previous submitted step (which sampled it: the engine guarantees it) and
  //    samples as if that token were appended to *output. The backend resolves it (the host
  //    has not seen it);
  //  - submit() throws when it refuses the plan (nothing is queued); collect() throws when the
  //    step failed (it is dequeued). A pending input whose step failed fails its step.
  // Defaults: submit() runs step() at once on the plan with its pending inputs resolved from
  // the previous step's results (PendingInputs) and queues the result; collect() returns it. So
  // a synchronous backend works unchanged, with no overlap.
  virtual void submit(const StepPlan& plan);
  virtual StepResult collect();

 private:
  PendingInputs pending_;            // the defaults' resolver
  std::deque<StepResult> finished_;  // the defaults' results not collected yet
};

}  // namespace strata
