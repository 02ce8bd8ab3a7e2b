// The Backend interface: the only way the engine reaches a device (CPU reference, CUDA,
// CUDA tensor-parallel). A backend owns the weights, the KV page storage (num_pages pages
// of KvLayout each, plus the per-slot scores of sparse layers) and its scratch memory.
//
// Threading: a backend is driven by exactly one thread (its RankExecutor); step() blocks
// until the step's results are on the host.
#pragma once

#include <memory>
#include <string>

#include "runtime/kv_layout.h"
#include "runtime/model/model_config.h"
#include "runtime/step_plan.h"

namespace strata {

struct BackendInfo {
  std::string name;       // "cpu", "cuda", "cuda-tp2"
  KvLayout layout;        // per-rank layout of one page
  int num_pages = 0;      // pages in the pool (page ids 0 .. num_pages-1)
  int tp_size = 1;
  std::size_t weight_bytes = 0;  // per rank
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
};

}  // namespace strata
