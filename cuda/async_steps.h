// Host half of the CUDA backend's pipelined steps (scheduler.async_steps; docs/contracts.md
// "Pipelined steps", docs/cuda-backend.md "Pipelined steps"): which steps can be pipelined, the
// staged copy of a plan whose pending rows read the previous step's token on the device, and the
// small index lists the feed kernels (cuda/async_feed.h) read. Plain C++ with no CUDA header: it
// runs and is unit-tested without a GPU (tests/cuda/async_steps_test.cpp).
//
// The device feed: every pipelined step ends with one kernel writing each sampled row's token
// into fed[plan index of that row] (int32 [max_seqs], on the device). The next step's pending
// row carries that index (FeedPair::src); a kernel copies fed[src] into the row's input token
// (and, when a penalty reads the history, into the sampler's history entry that stands for the
// pending token) before anything reads it. One array suffices: the stream orders step n+1's
// reads before its own writes.
//
// Threading: the backend's thread only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cuda/sampling_prep.h"
#include "cuda/step_layout.h"
#include "runtime/step_plan.h"

namespace strata::cuda {

// What a pending row's input and its history's last entry hold on the host until the device
// overwrites them (any id inside every vocabulary: the planner's checks accept it).
inline constexpr std::int32_t kFeedPlaceholder = 0;

// One device copy: dst (an input row, or an index into the sampler's history) <- fed[src].
struct FeedPair {
  std::int32_t dst = 0;
  std::int32_t src = 0;
};

// Why a step cannot be pipelined (runs synchronously after the steps in flight; the reason is
// its StepStats::sync), or SyncReason::kNone. Rows sampled on the host (runtime/sampler.h:
// logprobs > 20, huge vocabularies) need their logits on the host, return_logits copies whole
// logits rows to the host per chunk, tensor parallelism waits on the collectives (kBackend),
// profiling reads every event of the step. report_kept pipelines (the census's gather and copy
// are queued with the step, counted at collect: backend/census.cpp).
SyncReason pipeline_blocker_of_plan(const StepPlan& plan, int vocab, bool tensor_parallel,
                                    bool profiling);
// The same after planning: more than one lm_head chunk, or host rows (defensive: the plan test
// above implies neither for steps that fit one chunk).
SyncReason pipeline_blocker_of_layout(const StepLayout& layout);

// The previous pipelined step's sampled rows, and the staged copy of the next plan.
class PendingFeed {
 public:
  // The step just submitted: its sampling rows (seq_id -> plan index) feed the next step.
  void record(const StepPlan& plan);
  void forget() { sampled_.clear(); }
  // `plan` itself without pending rows; otherwise a copy (valid until the next stage()) in
  // which each pending row's token is kFeedPlaceholder and its output is *output +
  // kFeedPlaceholder (so the draw index is output->size() + 1, min_tokens counts it and the
  // penalties' history has an entry for it), and `inputs` gets (plan index, fed index) of each.
  // InternalError when the previous step did not sample for such a sequence.
  const StepPlan& stage(const StepPlan& plan, std::vector<FeedPair>& inputs);

 private:
  std::vector<std::pair<std::uint64_t, std::int32_t>> sampled_;  // (seq_id, plan index)
  StepPlan staged_;
  std::vector<std::vector<std::int32_t>> histories_;
};

// Input rows to overwrite: `inputs` from stage() (plan index -> fed index) as (row, fed index),
// rows from layout.first_row.
std::vector<FeedPair> token_feeds(const std::vector<FeedPair>& inputs, const StepLayout& layout);

// History entries to overwrite: for each device-sampled request j (plan index dev_plan[j]) that
// is pending and whose batch row counts its output (output_n > 0), the index of its last output
// id in batch.history (the placeholder) with its fed index.
std::vector<FeedPair> history_feeds(const std::vector<FeedPair>& inputs,
                                    const std::vector<int>& dev_plan, const SampleBatch& batch);

// Per plan index, where the step's sampled token is on the device for the feed kernel:
// >= 0 the argmax buffer's row, <= -2 the device sampler's result -(code + 2), -1 none.
std::vector<std::int32_t> feed_sources(const StepLayout& layout);

}  // namespace strata::cuda
