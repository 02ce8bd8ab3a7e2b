#include "cuda/async_steps.h"

#include <algorithm>

#include "runtime/pending_inputs.h"

namespace strata::cuda {

namespace {

// The step layout's routes (cuda/step_layout.cpp plan_logits): a row goes to the host sampler
// when neither the device argmax nor the device sampler covers its parameters.
bool host_sampled(const SeqStep& s, int vocab) {
  const SamplingParams* p = s.params;
  if (!p) return false;  // the planner's checks reject it
  const bool greedy = p->temperature == 0.0f && p->logprobs < 0 && p->logit_bias.empty() &&
                      p->repetition_penalty == 1.0f && p->frequency_penalty == 0.0f &&
                      p->presence_penalty == 0.0f;
  return !greedy && !device_sampling_supported(*p, vocab);
}

}  // namespace

SyncReason pipeline_blocker_of_plan(const StepPlan& plan, int vocab, bool tensor_parallel,
                                    bool profiling) {
  if (tensor_parallel) return SyncReason::kBackend;
  if (profiling) return SyncReason::kProfile;
  for (const SeqStep& s : plan.seqs) {
    if (s.return_logits) return SyncReason::kReturnLogits;
    if (s.sample && host_sampled(s, vocab)) return SyncReason::kHostSampled;
  }
  return SyncReason::kNone;
}

SyncReason pipeline_blocker_of_layout(const StepLayout& layout) {
  if (layout.chunks.size() > 1) return SyncReason::kLmChunks;
  for (const LmChunk& c : layout.chunks)
    if (!c.host_rows.empty()) return SyncReason::kReturnLogits;
  for (SampleRoute r : layout.route)
    if (r == SampleRoute::kHost) return SyncReason::kHostSampled;
  return SyncReason::kNone;
}

void PendingFeed::record(const StepPlan& plan) {
  sampled_.clear();
  for (std::size_t i = 0; i < plan.seqs.size(); ++i)
    if (plan.seqs[i].sample)
      sampled_.emplace_back(plan.seqs[i].seq_id, static_cast<std::int32_t>(i));
  std::sort(sampled_.begin(), sampled_.end());
}

const StepPlan& PendingFeed::stage(const StepPlan& plan, std::vector<FeedPair>& inputs) {
  inputs.clear();
  const bool any = resolve_pending_rows(plan, sampled_, staged_, histories_,
                                        [&](std::size_t row, std::int32_t fed) {
                                          inputs.push_back({static_cast<std::int32_t>(row), fed});
                                          return kFeedPlaceholder;
                                        });
  return any ? staged_ : plan;
}

std::vector<FeedPair> token_feeds(const std::vector<FeedPair>& inputs, const StepLayout& layout) {
  std::vector<FeedPair> out;
  out.reserve(inputs.size());
  for (const FeedPair& f : inputs)
    out.push_back({layout.first_row[static_cast<std::size_t>(f.dst)], f.src});
  return out;
}

std::vector<FeedPair> history_feeds(const std::vector<FeedPair>& inputs,
                                    const std::vector<int>& dev_plan, const SampleBatch& batch) {
  std::vector<FeedPair> out;
  for (std::size_t j = 0; j < dev_plan.size() && j < batch.rows.size(); ++j) {
    const SampleRowDesc& r = batch.rows[j];
    if (r.output_n <= 0) continue;
    for (const FeedPair& f : inputs) {
      if (f.dst != dev_plan[j]) continue;
      out.push_back({r.hist_off + r.prompt_n + r.output_n - 1, f.src});
      break;
    }
  }
  return out;
}

std::vector<std::int32_t> feed_sources(const StepLayout& layout) {
  std::vector<std::int32_t> src(static_cast<std::size_t>(layout.num_seqs), -1);
  for (int i = 0; i < layout.num_seqs; ++i) {
    const LmSlot slot = layout.lm[static_cast<std::size_t>(i)];
    if (slot.first >= 0 && layout.route[static_cast<std::size_t>(i)] == SampleRoute::kDeviceArgmax)
      src[static_cast<std::size_t>(i)] = slot.first + slot.count - 1;
  }
  if (!layout.chunks.empty()) {
    const std::vector<int>& dev = layout.chunks.front().device_sampled;
    for (std::size_t j = 0; j < dev.size(); ++j)
      src[static_cast<std::size_t>(dev[j])] = -2 - static_cast<std::int32_t>(j);
  }
  return src;
}

}  // namespace strata::cuda
