// Host half of the CUDA backend's pipelined steps (cuda/async_steps.h), without a GPU: which
// steps pipeline, the staged plan of pending rows (placeholder token, history + placeholder, so
// the draw index is output->size() + 1 and min_tokens counts it), the fed-array indexing (the
// previous step's plan index), the token and history entries the feed kernels overwrite, the
// feed sources by route, and two alternating images planned one after the other (the second
// never writes the first's bytes).
#include "cuda/async_steps.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "runtime/error.h"
#include "runtime/kv_layout.h"

namespace strata::cuda {
namespace {

constexpr int kLayers = 2;
constexpr int kVocab = 100;

StepLimits limits() {
  StepLimits lim;
  lim.num_layers = kLayers;
  lim.vocab = kVocab;
  lim.num_pages = 256;
  lim.scratch_pages = 24;
  lim.max_seqs = 8;
  lim.max_tokens = 256;
  lim.max_table_pages = 32;
  lim.max_tiles = 256 / 64 + 8 + 1;
  lim.logit_rows = 16;
  lim.kv_heads = 2;
  lim.head_dim = 64;
  lim.num_sms = 132;
  lim.graph_buckets = {1, 2, 4, 8};
  return lim;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}
SamplingParams penalised() {
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 11;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.5f;
  return p;
}

struct Seqs {
  int next_page = 0;
  std::vector<std::vector<std::int32_t>> outputs = std::vector<std::vector<std::int32_t>>(8);
  std::vector<std::int32_t> prompt{5, 6, 7};
  SeqStep decode(std::uint64_t id, int pos, const SamplingParams* p, bool pending, int out) {
    SeqStep s;
    s.seq_id = id;
    s.tokens = {pending ? kPendingToken : 3};
    s.input_pending = pending;
    s.start = pos;
    s.prompt_len = 3;
    s.prefill = false;
    s.sample = true;
    s.params = p;
    s.prompt = &prompt;
    s.output = &outputs[static_cast<std::size_t>(out)];
    for (int l = 0; l < kLayers; ++l) {
      LayerSlots ls;
      ls.valid = pos;
      for (int i = 0; i < pages_for_slots(pos + 1); ++i) ls.pages.push_back(next_page++);
      s.layers.push_back(ls);
    }
    return s;
  }
};

TEST(AsyncStepsHost, BlockersOfPlan) {
  Seqs q;
  const SamplingParams g = greedy(), pen = penalised();
  StepPlan plan;
  plan.seqs.push_back(q.decode(1, 4, &g, false, 0));
  plan.seqs.push_back(q.decode(2, 4, &pen, false, 1));
  EXPECT_EQ(pipeline_blocker_of_plan(plan, kVocab, false, false), SyncReason::kNone);
  EXPECT_EQ(pipeline_blocker_of_plan(plan, kVocab, true, false), SyncReason::kBackend);
  EXPECT_EQ(pipeline_blocker_of_plan(plan, kVocab, false, true), SyncReason::kProfile);
  SamplingParams many = pen;
  many.logprobs = kMaxDeviceLogprobs + 1;  // host sampler
  plan.seqs[1].params = &many;
  EXPECT_EQ(pipeline_blocker_of_plan(plan, kVocab, false, false), SyncReason::kHostSampled);
  plan.seqs[1].params = &pen;
  plan.seqs[0].return_logits = true;
  EXPECT_EQ(pipeline_blocker_of_plan(plan, kVocab, false, false), SyncReason::kReturnLogits);
  plan.seqs[0].return_logits = false;
  // The census pipelines: its gather and copy are queued with the step (backend/census.cpp).
  plan.seqs[0].report_kept = true;
  EXPECT_EQ(pipeline_blocker_of_plan(plan, kVocab, false, false), SyncReason::kNone);
  EXPECT_STREQ(to_string(SyncReason::kReportKept), "report_kept");
}

TEST(AsyncStepsHost, StageIndexesThePreviousStepsPlanRows) {
  Seqs q;
  const SamplingParams g = greedy(), pen = penalised();
  q.outputs[1] = {9, 8};
  StepPlan prev;
  prev.seqs.push_back(q.decode(30, 4, &g, false, 2));
  prev.seqs.push_back(q.decode(10, 4, &pen, false, 1));
  prev.seqs.push_back(q.decode(20, 4, &g, false, 0));
  PendingFeed feed;
  feed.record(prev);

  StepPlan next;
  next.seqs.push_back(q.decode(20, 5, &g, true, 0));
  next.seqs.push_back(q.decode(40, 5, &g, false, 3));
  next.seqs.push_back(q.decode(10, 5, &pen, true, 1));
  std::vector<FeedPair> inputs;
  const StepPlan& st = feed.stage(next, inputs);
  ASSERT_NE(&st, &next);
  ASSERT_EQ(inputs.size(), 2u);
  EXPECT_EQ(inputs[0].dst, 0);  // plan index 0 (seq 20) <- fed[2]
  EXPECT_EQ(inputs[0].src, 2);
  EXPECT_EQ(inputs[1].dst, 2);  // plan index 2 (seq 10) <- fed[1]
  EXPECT_EQ(inputs[1].src, 1);
  EXPECT_FALSE(st.seqs[0].input_pending);
  EXPECT_EQ(st.seqs[0].tokens[0], kFeedPlaceholder);
  EXPECT_EQ(st.seqs[2].output->size(), 3u);  // draw index output->size() + 1
  EXPECT_EQ(st.seqs[2].output->back(), kFeedPlaceholder);
  EXPECT_EQ(next.seqs[2].output->size(), 2u) << "the engine's history is left alone";
  EXPECT_EQ(st.seqs[1].output, next.seqs[1].output);

  // The seeded draw of a staged row is the one of output index output->size() + 1.
  const SampleBatch b = prepare_samples(
      {{.logit_row = 0, .params = &pen, .prompt = st.seqs[2].prompt, .output = st.seqs[2].output}},
      kVocab);
  ASSERT_EQ(b.rows.size(), 1u);
  EXPECT_EQ(b.rows[0].u53, sample_uniform_bits(pen.seed, 3));
  // The penalties' history ends in the placeholder, which the history feed overwrites.
  const std::vector<FeedPair> h = history_feeds(inputs, {2}, b);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].src, 1);
  EXPECT_EQ(h[0].dst, b.rows[0].hist_off + b.rows[0].prompt_n + 2);
  EXPECT_EQ(b.history[static_cast<std::size_t>(h[0].dst)], kFeedPlaceholder);
  EXPECT_EQ(b.history[static_cast<std::size_t>(h[0].dst) - 1], 8);

  // A sequence the previous step did not sample: an engine bug.
  StepPlan bad;
  bad.seqs.push_back(q.decode(99, 5, &g, true, 4));
  EXPECT_THROW(feed.stage(bad, inputs), InternalError);
  // No pending row: the plan itself.
  StepPlan none;
  none.seqs.push_back(q.decode(10, 5, &g, false, 4));
  EXPECT_EQ(&feed.stage(none, inputs), &none);
  EXPECT_TRUE(inputs.empty());
}

TEST(AsyncStepsHost, MinTokensCountsThePendingToken) {
  Seqs q;
  SamplingParams p = penalised();
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.0f;
  p.min_tokens = 3;
  p.ignore_eos = false;
  const std::vector<std::int32_t> eos{7};
  q.outputs[0] = {1, 2};  // + the pending token = 3: the ban is over
  StepPlan prev;
  prev.seqs.push_back(q.decode(1, 4, &p, false, 0));
  PendingFeed feed;
  feed.record(prev);
  StepPlan next;
  next.seqs.push_back(q.decode(1, 5, &p, true, 0));
  std::vector<FeedPair> inputs;
  const StepPlan& st = feed.stage(next, inputs);
  const SampleBatch staged =
      prepare_samples({{.params = &p, .output = st.seqs[0].output, .eos_ids = &eos}}, kVocab);
  const SampleBatch unstaged =
      prepare_samples({{.params = &p, .output = next.seqs[0].output, .eos_ids = &eos}}, kVocab);
  EXPECT_EQ(staged.rows[0].edit_n, 0) << "min_tokens reached with the pending token";
  EXPECT_EQ(unstaged.rows[0].edit_n, 1);
}

TEST(AsyncStepsHost, FeedsByRouteAndAlternatingImages) {
  const StepLimits lim = limits();
  StepPlanner planner(lim);
  const StepImageLayout at = StepImageLayout::for_limits(lim);
  std::vector<std::byte> mem0(at.bytes + 16), mem1(at.bytes + 16);
  auto aligned = [&](std::vector<std::byte>& m) {
    auto p = reinterpret_cast<std::uintptr_t>(m.data());
    return std::span<std::byte>(m.data() + ((16 - p % 16) % 16), at.bytes);
  };
  const StepImage img[2] = {StepImage(aligned(mem0), at), StepImage(aligned(mem1), at)};
  StepLayout lay[2];
  Seqs q;
  const SamplingParams g = greedy(), pen = penalised();
  StepPlan a;
  a.seqs.push_back(q.decode(1, 4, &g, false, 0));
  a.seqs.push_back(q.decode(2, 4, &pen, false, 1));
  a.seqs.push_back(q.decode(3, 4, &g, false, 2));
  planner.build(a, StepOptions{.device_tables = true}, img[0], lay[0]);
  EXPECT_EQ(pipeline_blocker_of_layout(lay[0]), SyncReason::kNone);
  const std::vector<std::int32_t> src = feed_sources(lay[0]);
  ASSERT_EQ(src.size(), 3u);
  EXPECT_EQ(src[0], lay[0].lm[0].first);  // argmax row
  EXPECT_EQ(src[1], -2);                  // device sampler request 0
  EXPECT_EQ(src[2], lay[0].lm[2].first);
  const std::vector<std::byte> before(img[0].data(), img[0].data() + at.bytes);

  PendingFeed feed;
  feed.record(a);
  StepPlan b;
  b.seqs.push_back(q.decode(3, 5, &g, true, 2));
  b.seqs.push_back(q.decode(1, 5, &g, true, 0));
  q.next_page = 0;  // the same pages as step a (the tables did not change)
  b.seqs[0].layers = a.seqs[2].layers;
  b.seqs[1].layers = a.seqs[0].layers;
  for (SeqStep* s : {&b.seqs[0], &b.seqs[1]})
    for (LayerSlots& ls : s->layers) ls.valid = 5;
  std::vector<FeedPair> inputs;
  const StepPlan& st = feed.stage(b, inputs);
  planner.build(st, StepOptions{.device_tables = true}, img[1], lay[1]);
  EXPECT_EQ(std::memcmp(before.data(), img[0].data(), at.bytes), 0)
      << "planning step n+1 wrote step n's image";
  const std::vector<FeedPair> tok = token_feeds(inputs, lay[1]);
  ASSERT_EQ(tok.size(), 2u);
  EXPECT_EQ(tok[0].dst, lay[1].first_row[0]);
  EXPECT_EQ(tok[0].src, 2);  // seq 3 was plan row 2 of step a
  EXPECT_EQ(tok[1].dst, lay[1].first_row[1]);
  EXPECT_EQ(tok[1].src, 0);
  EXPECT_EQ(img[1].tokens()[tok[0].dst], kFeedPlaceholder);
}

}  // namespace
}  // namespace strata::cuda
