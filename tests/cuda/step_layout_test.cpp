// The plan half of a CUDA step (cuda/step_layout.h), without a GPU: row order, the upload
// image, graph bucket and padding, sparse workspace offsets, lm_head chunks, sampling routes
// and the plan checks, as tables of scenarios.
#include "cuda/step_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cuda/sparse/sparse_plan.h"
#include "runtime/error.h"
#include "runtime/kv_layout.h"
#include "tests/cuda/layer_rules.h"

namespace strata::cuda {
namespace {

constexpr int kLayers = 2;
constexpr int kVocab = 100;
constexpr int kPages = 256;

StepLimits test_limits() {
  StepLimits lim;
  lim.num_layers = kLayers;
  lim.vocab = kVocab;
  lim.num_pages = kPages;
  lim.scratch_pages = 24;
  lim.max_seqs = 8;
  lim.max_tokens = 256;
  lim.max_table_pages = 32;  // max_model_len 512
  lim.max_tiles = 256 / 64 + 8 + 1;
  lim.logit_rows = 4;  // small, so that chunking shows at a few rows
  lim.kv_heads = 2;
  lim.head_dim = 64;
  lim.num_sms = 132;
  lim.graph_buckets = {1, 2, 4, 8};
  return lim;
}

using testutil::scored;
LayerRule window_rule(int capacity) {
  LayerRule r = scored(capacity);
  r.policy = Policy::kWindow;
  r.ring = capacity - r.sinks;
  return r;
}

// Hands out distinct page ids.
struct Pages {
  int next = 0;
  std::vector<std::int32_t> take(int n) {
    std::vector<std::int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(next++);
    return out;
  }
};

const SamplingParams& greedy() {
  static const SamplingParams p = [] {
    SamplingParams q;
    q.temperature = 0.0f;
    return q;
  }();
  return p;
}

// A full-cache sequence of `pos + n` tokens so far: prefill chunk [start, start + n) or one
// decode token at `start`.
SeqStep full_seq(Pages& pg, std::uint64_t id, int start, int n, bool prefill, int prompt_len,
                 bool sample = true) {
  SeqStep s;
  s.seq_id = id;
  for (int t = 0; t < n; ++t) s.tokens.push_back((start + t + static_cast<int>(id)) % kVocab);
  s.start = start;
  s.prompt_len = prompt_len;
  s.prefill = prefill;
  s.sample = sample;
  s.params = sample ? &greedy() : nullptr;
  static const std::vector<std::int32_t> no_output;
  s.output = sample ? &no_output : nullptr;
  for (int l = 0; l < kLayers; ++l) {
    LayerSlots ls;
    ls.valid = start;
    ls.pages = pg.take(pages_for_slots(start + n));
    s.layers.push_back(ls);
  }
  return s;
}
SeqStep decode(Pages& pg, std::uint64_t id, int pos) {
  return full_seq(pg, id, pos, 1, false, pos);
}
SeqStep prefill(Pages& pg, std::uint64_t id, int start, int n, int prompt_len, bool sample) {
  return full_seq(pg, id, start, n, true, prompt_len, sample);
}

class StepLayoutTest : public ::testing::Test {
 protected:
  explicit StepLayoutTest(StepLimits lim = test_limits())
      : planner_(lim),
        at_(StepImageLayout::for_limits(lim)),
        mem_(at_.bytes),
        image_(std::span<std::byte>(mem_.data(), mem_.size()), at_) {}

  const StepLayout& build(const StepPlan& plan, StepOptions opt = {}) {
    planner_.build(plan, opt, image_, layout_);
    return layout_;
  }
  StepPlanner planner_;
  StepImageLayout at_;
  std::vector<std::byte> mem_;
  StepImage image_;
  StepLayout layout_;
};

TEST_F(StepLayoutTest, ImageSectionsAreAlignedAndDisjoint) {
  const std::vector<std::size_t> offs = {at_.tokens,   at_.pos,       at_.seq_of,  at_.lm_rows,
                                         at_.q_row,    at_.row_start, at_.nq,      at_.qpos0,
                                         at_.tile_seq, at_.tile_q0,   at_.seq_len, at_.slots,
                                         at_.dec_seqs, at_.tables,    at_.bytes};
  for (std::size_t i = 0; i + 1 < offs.size(); ++i) {
    EXPECT_EQ(offs[i] % 256, 0u) << i;
    EXPECT_LT(offs[i], offs[i + 1]) << i;
  }
  // The largest section: every (sequence, layer) table at its longest.
  EXPECT_GE(at_.bytes - at_.tables, 8u * kLayers * 32 * sizeof(std::int32_t));
}

TEST_F(StepLayoutTest, EmptyPlan) {
  const StepLayout& s = build(StepPlan{});
  EXPECT_EQ(s.num_seqs, 0);
  EXPECT_TRUE(s.chunks.empty());
}

// Decode-only batches: the smallest bucket >= batch, padding rows, all bucket rows through the
// lm_head, lm slots at the batch rows; no graph when graphs are off or no bucket fits.
TEST_F(StepLayoutTest, DecodeOnlyGraphBucketAndPadding) {
  struct Case {
    int batch;
    bool graphs;
    int forced_splits;
    int bucket;
  };
  const Case cases[] = {{1, true, 0, 1}, {3, true, 0, 4},  {5, true, 0, 8},
                        {8, true, 0, 8}, {3, false, 0, 0}, {3, true, 5, 4}};
  for (const Case& c : cases) {
    SCOPED_TRACE("batch " + std::to_string(c.batch) + " graphs " + std::to_string(c.graphs));
    Pages pg;
    StepPlan plan;
    for (int b = 0; b < c.batch; ++b)
      plan.seqs.push_back(decode(pg, static_cast<std::uint64_t>(b), 20 + 17 * b));
    const StepLayout& s =
        build(plan, StepOptions{.graphs = c.graphs, .forced_splits = c.forced_splits});
    ASSERT_EQ(s.decode_rows, c.batch);
    EXPECT_EQ(s.tiles, 0);
    EXPECT_EQ(s.rows, c.batch);
    EXPECT_EQ(s.max_len, 20 + 17 * (c.batch - 1) + 1);
    EXPECT_EQ(s.graph.bucket, c.bucket);
    const int run = c.bucket > 0 ? c.bucket : c.batch;
    EXPECT_EQ(s.run_rows, run);
    EXPECT_EQ(s.run_decode_rows, run);
    EXPECT_EQ(s.run_lm_rows, run);
    for (int b = 0; b < c.batch; ++b) {
      EXPECT_EQ(s.order[static_cast<std::size_t>(b)], b);
      EXPECT_EQ(image_.q_row()[b], b);
      EXPECT_EQ(image_.pos()[b], 20 + 17 * b);
      EXPECT_EQ(image_.seq_of()[b], b);
      for (int l = 0; l < kLayers; ++l) {
        const std::size_t at = static_cast<std::size_t>(l) * 8 + b;
        EXPECT_EQ(image_.seq_len()[at], 20 + 17 * b + 1);  // full layer: position + 1
        EXPECT_EQ(image_.slots()[at], 20 + 17 * b);
        EXPECT_EQ(image_.dec_seqs()[at].policy, 0);
      }
      EXPECT_EQ(s.lm[static_cast<std::size_t>(b)].first, b);
      EXPECT_EQ(s.route[static_cast<std::size_t>(b)], SampleRoute::kDeviceArgmax);
    }
    for (int b = c.batch; b < c.bucket; ++b) {  // padding
      EXPECT_EQ(image_.tokens()[b], 0);
      EXPECT_EQ(image_.seq_of()[b], -1);
      EXPECT_EQ(image_.q_row()[b], b);
      for (int l = 0; l < kLayers; ++l)
        EXPECT_EQ(image_.seq_len()[static_cast<std::size_t>(l) * 8 + b], 0);
    }
    for (int b = 0; b < run; ++b) EXPECT_EQ(image_.lm_rows()[b], b);
    const int eager =
        c.forced_splits > 0 ? c.forced_splits : pick_decode_splits(c.batch, s.max_len, 2, 132);
    EXPECT_EQ(s.eager_splits, eager);
    if (c.bucket > 0) {
      // Full-cache graphs: splits from the bucket and max_model_len (one graph per bucket).
      EXPECT_EQ(s.graph.splits,
                c.forced_splits > 0 ? c.forced_splits : pick_decode_splits(c.bucket, 512, 2, 132));
      EXPECT_EQ(s.graph.slot_bucket, 0);
    }
    ASSERT_EQ(s.chunks.size(), static_cast<std::size_t>((run + 3) / 4));
  }
}

TEST_F(StepLayoutTest, NoBucketFitsRunsEagerly) {
  StepLimits lim = test_limits();
  lim.graph_buckets = {1, 2};
  StepPlanner planner(lim);
  Pages pg;
  StepPlan plan;
  for (int b = 0; b < 3; ++b) plan.seqs.push_back(decode(pg, static_cast<std::uint64_t>(b), 5));
  StepLayout s;
  planner.build(plan, {}, image_, s);
  EXPECT_EQ(s.graph.bucket, 0);
  EXPECT_EQ(s.run_rows, 3);
}

TEST(StepLayout, DecodeSplits) {
  struct Case {
    int batch, max_len, kv_heads, sms, splits;
  };
  const Case cases[] = {
      {1, 4096, 8, 132, 16},    // by length: 4096 / 256
      {1, 100000, 8, 132, 33},  // by SMs: ceil(264 / 8)
      {1, 100000, 1, 264, 64},  // capped
      {64, 4096, 8, 132, 1},    // by SMs: ceil(264 / 512)
      {32, 4096, 8, 132, 2},    // ceil(264 / 256)
      {256, 4096, 8, 132, 1},   //
      {1, 1, 8, 132, 1},        // at least one
      {4, 4096, 2, 66, 16},     // ceil(132 / 8) = 17 > 16 by length
  };
  for (const Case& c : cases)
    EXPECT_EQ(pick_decode_splits(c.batch, c.max_len, c.kv_heads, c.sms), c.splits)
        << c.batch << " " << c.max_len;
}

// Mixed prefill + decode: decode rows first in plan order, then the prefill chunks; tiles of
// 64 queries; table rows in row order at the step's pitch; no graph.
TEST_F(StepLayoutTest, MixedPrefillAndDecode) {
  Pages pg;
  StepPlan plan;
  plan.seqs.push_back(prefill(pg, 10, 0, 10, 10, true));     // plan 0
  plan.seqs.push_back(decode(pg, 11, 40));                   // plan 1
  plan.seqs.push_back(prefill(pg, 12, 16, 70, 200, false));  // plan 2: middle chunk
  plan.seqs.push_back(decode(pg, 13, 7));                    // plan 3
  const StepLayout& s = build(plan);
  EXPECT_EQ(s.order, (std::vector<int>{1, 3, 0, 2}));
  EXPECT_EQ(s.first_row, (std::vector<int>{2, 0, 12, 1}));
  EXPECT_EQ(s.decode_row, (std::vector<char>{0, 1, 0, 1}));
  EXPECT_EQ(s.rows, 82);
  EXPECT_EQ(s.decode_rows, 2);
  EXPECT_EQ(s.tiles, 3);
  EXPECT_EQ(s.graph.bucket, 0);
  EXPECT_EQ(s.run_rows, 82);
  EXPECT_EQ(image_.tile_seq()[0], 2);
  EXPECT_EQ(image_.tile_q0()[0], 0);
  EXPECT_EQ(image_.tile_seq()[1], 3);
  EXPECT_EQ(image_.tile_q0()[1], 0);
  EXPECT_EQ(image_.tile_seq()[2], 3);
  EXPECT_EQ(image_.tile_q0()[2], 64);
  EXPECT_EQ(image_.row_start()[2], 2);
  EXPECT_EQ(image_.nq()[2], 10);
  EXPECT_EQ(image_.row_start()[3], 12);
  EXPECT_EQ(image_.nq()[3], 70);
  EXPECT_EQ(image_.qpos0()[3], 16);
  EXPECT_EQ(image_.q_row()[0], 0);
  EXPECT_EQ(image_.q_row()[1], 1);
  for (int t = 0; t < 70; ++t) {
    EXPECT_EQ(image_.pos()[12 + t], 16 + t);
    EXPECT_EQ(image_.seq_of()[12 + t], 3);
  }
  // Pitch: the longest table needed (plan 2: 86 slots -> 6 pages); rows past a table are 0.
  EXPECT_EQ(s.table_pages, 6);
  const int pitch = s.table_pages;
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < kLayers; ++l) {
      const SeqStep& q = plan.seqs[static_cast<std::size_t>(s.order[static_cast<std::size_t>(k)])];
      const auto& t = q.layers[static_cast<std::size_t>(l)].pages;
      const int* row = image_.tables() + (k * kLayers + l) * pitch;
      for (int p = 0; p < pitch; ++p)
        EXPECT_EQ(row[p], p < static_cast<int>(t.size()) ? t[static_cast<std::size_t>(p)] : 0);
    }
  // lm rows: plan 0's last token (row 11), plan 1 (row 0), plan 3 (row 1); plan 2 not sampled.
  EXPECT_EQ(s.lm_rows, 3);
  EXPECT_EQ(image_.lm_rows()[0], 11);
  EXPECT_EQ(image_.lm_rows()[1], 0);
  EXPECT_EQ(image_.lm_rows()[2], 1);
  EXPECT_EQ(s.lm[0].first, 0);
  EXPECT_EQ(s.lm[1].first, 1);
  EXPECT_EQ(s.lm[2].first, -1);
  EXPECT_EQ(s.lm[3].first, 2);
  EXPECT_EQ(s.route[2], SampleRoute::kNone);
  EXPECT_FALSE(s.sparse.any);
}

// Chunked lm_head: logit_rows = 4 here; return_logits rows go to the host, the sampled row's
// chunk draws it.
TEST_F(StepLayoutTest, ChunkedLmHeadRows) {
  Pages pg;
  StepPlan plan;
  plan.seqs.push_back(prefill(pg, 1, 0, 6, 6, false));  // teacher forcing: 6 rows
  plan.seqs[0].return_logits = true;
  plan.seqs.push_back(prefill(pg, 2, 0, 5, 5, true));  // sampled, greedy: 1 row
  SamplingParams lp;
  lp.logprobs = 25;  // host sampler
  plan.seqs.push_back(prefill(pg, 3, 0, 3, 3, true));
  plan.seqs[2].params = &lp;
  const StepLayout& s = build(plan);
  EXPECT_EQ(s.lm_rows, 8);
  for (int t = 0; t < 6; ++t) EXPECT_EQ(image_.lm_rows()[t], t);
  EXPECT_EQ(image_.lm_rows()[6], 10);
  EXPECT_EQ(image_.lm_rows()[7], 13);
  EXPECT_EQ(s.lm[0].first, 0);
  EXPECT_EQ(s.lm[0].count, 6);
  EXPECT_EQ(s.lm[1].first, 6);
  EXPECT_EQ(s.lm[2].first, 7);
  ASSERT_EQ(s.chunks.size(), 2u);
  EXPECT_EQ(s.chunks[0].base, 0);
  EXPECT_EQ(s.chunks[0].rows, 4);
  EXPECT_EQ(s.chunks[0].host_rows, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(s.chunks[1].base, 4);
  EXPECT_EQ(s.chunks[1].rows, 4);
  EXPECT_EQ(s.chunks[1].host_rows, (std::vector<int>{0, 1, 3}));  // lm rows 4, 5 and 7
  EXPECT_TRUE(s.chunks[1].device_sampled.empty());
  EXPECT_EQ(s.route[1], SampleRoute::kDeviceArgmax);
  EXPECT_EQ(s.route[2], SampleRoute::kHost);
}

// Sampling route per row: device argmax only for plain greedy; everything the device sampler
// covers there; logprobs > 20 on the host.
TEST_F(StepLayoutTest, SamplingRoutePerRow) {
  struct Case {
    const char* name;
    std::function<void(SamplingParams&)> set;
    int output_len;
    SampleRoute route;
  };
  const std::vector<Case> cases = {
      {"greedy", [](SamplingParams&) {}, 0, SampleRoute::kDeviceArgmax},
      {"temperature", [](SamplingParams& p) { p.temperature = 0.7f; }, 0,
       SampleRoute::kDeviceSampler},
      {"repetition", [](SamplingParams& p) { p.repetition_penalty = 1.2f; }, 0,
       SampleRoute::kDeviceSampler},
      {"frequency", [](SamplingParams& p) { p.frequency_penalty = 0.5f; }, 0,
       SampleRoute::kDeviceSampler},
      {"presence", [](SamplingParams& p) { p.presence_penalty = 0.5f; }, 0,
       SampleRoute::kDeviceSampler},
      {"logit_bias",
       [](SamplingParams& p) {
         p.logit_bias = {{3, 1.0f}};
       },
       0, SampleRoute::kDeviceSampler},
      {"logprobs 0", [](SamplingParams& p) { p.logprobs = 0; }, 0, SampleRoute::kDeviceSampler},
      {"logprobs 20", [](SamplingParams& p) { p.logprobs = 20; }, 0, SampleRoute::kDeviceSampler},
      {"logprobs 21", [](SamplingParams& p) { p.logprobs = 21; }, 0, SampleRoute::kHost},
      {"min_tokens active", [](SamplingParams& p) { p.min_tokens = 3; }, 2,
       SampleRoute::kDeviceSampler},
      {"min_tokens reached", [](SamplingParams& p) { p.min_tokens = 3; }, 3,
       SampleRoute::kDeviceArgmax},
  };
  Pages pg;
  StepPlan plan;
  std::vector<SamplingParams> params(cases.size());
  std::vector<std::vector<std::int32_t>> outputs(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    params[i].temperature = 0.0f;
    cases[i].set(params[i]);
    outputs[i].assign(static_cast<std::size_t>(cases[i].output_len), 1);
  }
  // Two steps of 4 rows (max_seqs 8), one decode row per case.
  for (std::size_t first = 0; first < cases.size(); first += 4) {
    plan.seqs.clear();
    for (std::size_t i = first; i < std::min(cases.size(), first + 4); ++i) {
      plan.seqs.push_back(decode(pg, i, 9));
      plan.seqs.back().params = &params[i];
      plan.seqs.back().output = &outputs[i];
    }
    const StepLayout& s = build(plan);
    for (std::size_t i = first; i < std::min(cases.size(), first + 4); ++i) {
      const std::size_t j = i - first;
      EXPECT_EQ(s.route[j], cases[i].route) << cases[i].name;
      const auto& dev = s.chunks.front().device_sampled;
      const bool on_dev = std::find(dev.begin(), dev.end(), static_cast<int>(j)) != dev.end();
      EXPECT_EQ(on_dev, cases[i].route == SampleRoute::kDeviceSampler) << cases[i].name;
      const auto& host = s.chunks.front().host_rows;
      const bool on_host = std::find(host.begin(), host.end(), s.lm[j].first) != host.end();
      EXPECT_EQ(on_host, cases[i].route == SampleRoute::kHost) << cases[i].name;
    }
  }
}

// Sparse layers: layer 0 full, layer 1 sparse. Prefill of a prompt longer than C in one step
// (kSelect from backend scratch), a direct prefill (prompt fits, window policy) and a decode
// with a kShrink: workspace offsets named per layer, scratch after the metadata.
TEST_F(StepLayoutTest, SparsePrefillShrinkOffsets) {
  Pages pg;
  StepPlan plan;
  // plan 0: scored C = 64, prompt 100 whole in this step with kSelect, no temp pages.
  SeqStep a = prefill(pg, 1, 0, 100, 100, true);
  a.layers[1].rule = scored(64);
  a.layers[1].pages = pg.take(pages_for_slots(64));
  a.layers[1].action = LayerAction::kSelect;
  // plan 1: window C = 64, prompt 40 fits: direct.
  SeqStep b = prefill(pg, 2, 0, 40, 40, true);
  b.layers[1].rule = window_rule(64);
  // plan 2: scored decode at valid 50 (ring not full), shrink to 40.
  SeqStep c = decode(pg, 3, 70);
  c.layers[1].rule = scored(64);
  c.layers[1].valid = 50;
  c.layers[1].pages = pg.take(pages_for_slots(64));
  c.layers[1].action = LayerAction::kShrink;
  c.layers[1].shrink_to = 40;
  plan.seqs = {a, b, c};
  const StepLayout& s = build(plan, StepOptions{.sparse_graphs = true});
  EXPECT_TRUE(s.sparse_prefill);
  EXPECT_TRUE(s.shrink);
  EXPECT_TRUE(s.sparse_decode);
  EXPECT_EQ(s.graph.bucket, 0);  // prefill and shrink: eager
  EXPECT_EQ(s.order, (std::vector<int>{2, 0, 1}));
  // Decode row of the sparse layer: attends valid + 1, writes slot valid.
  EXPECT_EQ(image_.seq_len()[8 + 0], 51);
  EXPECT_EQ(image_.slots()[8 + 0], 50);
  EXPECT_EQ(image_.dec_seqs()[8 + 0].policy, static_cast<int>(Policy::kScored));
  EXPECT_EQ(image_.dec_seqs()[8 + 0].table, (0 * kLayers + 1) * 32);
  EXPECT_EQ(s.dec_max_slots, 51);
  // Table of plan 0's sparse layer (order index 1): the scratch pages, past the pool.
  const int* row = image_.tables() + (1 * kLayers + 1) * s.table_pages;
  for (int p = 0; p < pages_for_slots(100); ++p) EXPECT_EQ(row[p], kPages + p);
  ASSERT_TRUE(s.sparse.any);
  ASSERT_EQ(s.sparse.layers.size(), 2u);
  const SparseLayerWork& w0 = s.sparse.layers[0];
  EXPECT_EQ(w0.prefill_num_seqs, 0);
  EXPECT_EQ(w0.shrink_num_seqs, 0);
  const SparseLayerWork& w = s.sparse.layers[1];
  // What plan_sparse_prefill makes of the two inputs (rows: plan 0 at 1..100, plan 1 after).
  sparse::PrefillInput in_a;
  in_a.rule = scored(64);
  in_a.prompt_len = 100;
  in_a.last_row = 100;
  for (int p = 0; p < pages_for_slots(100); ++p) in_a.src_pages.push_back(kPages + p);
  in_a.dst_pages = a.layers[1].pages;
  sparse::PrefillInput in_b;
  in_b.rule = window_rule(64);
  in_b.prompt_len = 40;
  in_b.direct = true;
  in_b.last_row = 140;
  in_b.dst_pages = b.layers[1].pages;
  const sparse::PrefillPlan pl = sparse::plan_sparse_prefill({in_a, in_b}, 2);
  EXPECT_EQ(w.prefill_num_seqs, 2);
  EXPECT_EQ(w.prefill_max_len, pl.max_len);
  EXPECT_EQ(w.prefill_max_kept, pl.max_kept);
  EXPECT_EQ(w.prefill_seqs, 0u);
  EXPECT_EQ(w.src_pages, 256u);  // each block 256-aligned after the previous one
  EXPECT_EQ(w.dst_pages % 256, 0u);
  EXPECT_GT(w.dst_pages, w.src_pages);
  EXPECT_EQ(w.shrink_num_seqs, 1);
  EXPECT_GT(w.shrink_seqs, w.dst_pages);
  EXPECT_GT(w.shrink_pages, w.shrink_seqs);
  const auto& meta = s.sparse.meta;
  ASSERT_GE(meta.size(), w.shrink_pages + c.layers[1].pages.size() * 4);
  sparse::PrefillSeq seq0;
  std::memcpy(&seq0, meta.data() + w.prefill_seqs, sizeof seq0);
  EXPECT_EQ(seq0.prompt_len, pl.seqs[0].prompt_len);
  EXPECT_EQ(seq0.q_row, pl.seqs[0].q_row);
  EXPECT_EQ(seq0.kept, 64);
  sparse::ShrinkSeq sh;
  std::memcpy(&sh, meta.data() + w.shrink_seqs, sizeof sh);
  EXPECT_EQ(sh.valid, 51);  // state after the decode, before the shrink
  EXPECT_EQ(sh.shrink_to, 40);
  // Scratch after the metadata, each part sized by the plan.
  const SparseScratch& sc = s.sparse.scratch;
  auto up = [](std::size_t n) { return (n + 255) / 256 * 256; };
  EXPECT_EQ(sc.raw, up(meta.size()));
  EXPECT_EQ(sc.pooled, sc.raw + up(pl.score_floats * 4));
  EXPECT_EQ(sc.kept_idx, sc.pooled + up(pl.score_floats * 4));
  EXPECT_EQ(sc.kept_score, sc.kept_idx + up(pl.kept_elems * 4));
  EXPECT_EQ(sc.stage_idx, sc.kept_score + up(pl.kept_elems * 4));
  const std::size_t stage = 2 * 40;  // kv_heads * shrink_to
  EXPECT_EQ(sc.stage_kv, sc.stage_idx + up(stage * 4));
  EXPECT_EQ(sc.stage_score, sc.stage_kv + up(stage * 2 * 64 * 2));
  EXPECT_EQ(sc.stage_pos, sc.stage_score + up(stage * 4));
  EXPECT_EQ(sc.bytes, sc.stage_pos + up(stage * 4 + 1));
}

// Sparse decode: eager unless sparse_graphs; graphs keyed by a power-of-two slot bound >= 64
// and use the eager split count; snapkv decode appends past C.
TEST_F(StepLayoutTest, SparseDecodeGraphKey) {
  struct Case {
    Policy policy;
    int valid;
    bool sparse_graphs;
    int bucket, slot_bucket, seq_len;
  };
  const Case cases[] = {
      {Policy::kScored, 10, false, 0, 0, 11},    {Policy::kScored, 10, true, 2, 64, 11},
      {Policy::kScored, 64, true, 2, 64, 64},     // ring full: attends C
      {Policy::kSnapKv, 100, true, 2, 128, 101},  // appends past C
      {Policy::kWindow, 64, true, 2, 64, 64},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(to_string(c.policy)) + " valid " + std::to_string(c.valid));
    Pages pg;
    StepPlan plan;
    plan.seqs.push_back(decode(pg, 1, 30));
    SeqStep d = decode(pg, 2, 200);
    LayerRule r = c.policy == Policy::kWindow ? window_rule(64) : scored(64);
    if (c.policy == Policy::kSnapKv) r.policy = Policy::kSnapKv, r.ring = 0;
    d.layers[1].rule = r;
    d.layers[1].valid = c.valid;
    d.layers[1].pages = pg.take(pages_for_slots(std::max(64, c.valid + 1)));
    plan.seqs.push_back(d);
    const StepLayout& s = build(plan, StepOptions{.sparse_graphs = c.sparse_graphs});
    EXPECT_TRUE(s.sparse_decode);
    EXPECT_EQ(s.graph.bucket, c.bucket);
    EXPECT_EQ(s.graph.slot_bucket, c.slot_bucket);
    EXPECT_EQ(image_.seq_len()[8 + 1], c.seq_len);
    if (c.bucket > 0) {
      EXPECT_EQ(s.graph.splits, s.eager_splits);
    }
  }
}

// One-token prefill chunks go through the decode kernel when every sparse layer holds the
// prompt directly; otherwise through the prefill kernel.
TEST_F(StepLayoutTest, OneTokenPrefillRowKind) {
  Pages pg;
  StepPlan plan;
  SeqStep direct = prefill(pg, 1, 5, 1, 6, true);
  direct.layers[1].rule = scored(64);
  SeqStep via_temp = prefill(pg, 2, 99, 1, 200, true);
  via_temp.layers[1].rule = scored(64);
  via_temp.layers[1].valid = 0;  // nothing held before the selection
  via_temp.layers[1].temp_pages = pg.take(pages_for_slots(100));
  via_temp.layers[1].pages = pg.take(pages_for_slots(64));
  plan.seqs = {via_temp, direct};
  const StepLayout& s = build(plan);
  EXPECT_EQ(s.decode_row, (std::vector<char>{0, 1}));
  EXPECT_EQ(s.order, (std::vector<int>{1, 0}));
  EXPECT_EQ(s.tiles, 1);
}

// What the run uploads is a function of the step's plan only: staged after a larger step, the
// uploaded ranges of every section equal those of a fresh image (stale rows, tables and
// prefill entries are overwritten or zeroed).
TEST_F(StepLayoutTest, UploadedRangesDependOnThePlanOnly) {
  Pages pg;
  StepPlan big;
  for (int i = 0; i < 4; ++i) big.seqs.push_back(prefill(pg, i, 0, 60, 60, true));
  big.seqs.push_back(decode(pg, 4, 104));
  StepPlan small;
  small.seqs.push_back(decode(pg, 20, 9));
  small.seqs.push_back(prefill(pg, 21, 0, 5, 5, true));
  small.seqs.push_back(decode(pg, 22, 40));
  for (const StepOptions opt : {StepOptions{}, StepOptions{.graphs = false}}) {
    build(big, opt);
    const StepLayout after = build(small, opt);
    StepPlanner fresh_planner(test_limits());
    std::vector<std::byte> fresh_mem(at_.bytes);
    StepImage fresh(std::span<std::byte>(fresh_mem.data(), fresh_mem.size()), at_);
    StepLayout f;
    fresh_planner.build(small, opt, fresh, f);
    auto same = [&](const std::int32_t* a, const std::int32_t* b, int n, const char* what) {
      for (int i = 0; i < n; ++i) EXPECT_EQ(a[i], b[i]) << what << " " << i;
    };
    same(image_.tokens(), fresh.tokens(), after.run_rows, "tokens");
    same(image_.pos(), fresh.pos(), after.run_rows, "pos");
    same(image_.seq_of(), fresh.seq_of(), after.run_rows, "seq_of");
    same(image_.q_row(), fresh.q_row(), after.run_decode_rows, "q_row");
    same(image_.lm_rows(), fresh.lm_rows(), after.run_lm_rows, "lm_rows");
    same(image_.row_start(), fresh.row_start(), after.num_seqs, "row_start");
    same(image_.nq(), fresh.nq(), after.num_seqs, "nq");
    same(image_.qpos0(), fresh.qpos0(), after.num_seqs, "qpos0");
    same(image_.tile_seq(), fresh.tile_seq(), after.tiles, "tile_seq");
    same(image_.tile_q0(), fresh.tile_q0(), after.tiles, "tile_q0");
    same(image_.tables(), fresh.tables(), after.num_seqs * kLayers * after.table_pages, "tables");
    for (int l = 0; l < kLayers; ++l) {
      same(image_.seq_len() + l * 8, fresh.seq_len() + l * 8, after.run_decode_rows, "seq_len");
      same(image_.slots() + l * 8, fresh.slots() + l * 8, after.run_decode_rows, "slots");
      EXPECT_EQ(std::memcmp(image_.dec_seqs() + l * 8, fresh.dec_seqs() + l * 8,
                            sizeof(sparse::DecodeSeq) * after.run_decode_rows),
                0);
    }
  }
}

// The plan checks (runtime/step_plan_check.h, the validator both backends share):
// InvalidRequest for what a request caused, InternalError for engine bugs.
TEST_F(StepLayoutTest, ValidationErrors) {
  enum class Kind { kInvalidRequest, kInternal };
  struct Case {
    const char* name;
    std::function<void(StepPlan&)> edit;
    Kind kind;
    const char* what;
  };
  const std::vector<Case> cases = {
      {"token outside the vocabulary", [](StepPlan& p) { p.seqs[0].tokens[3] = kVocab; },
       Kind::kInvalidRequest, "outside the vocabulary"},
      {"negative token", [](StepPlan& p) { p.seqs[0].tokens[0] = -1; }, Kind::kInvalidRequest,
       "outside the vocabulary"},
      {"past max_model_len", [](StepPlan& p) { p.seqs[1].start = 512; }, Kind::kInvalidRequest,
       "exceeds the backend's 512 positions"},
      {"no tokens", [](StepPlan& p) { p.seqs[0].tokens.clear(); }, Kind::kInternal,
       "0 tokens in a prefill chunk"},
      {"layer count", [](StepPlan& p) { p.seqs[1].layers.pop_back(); }, Kind::kInternal,
       "layer states for 2 layers"},
      {"page outside the pool", [](StepPlan& p) { p.seqs[0].layers[0].pages[0] = kPages; },
       Kind::kInternal, "outside the pool"},
      {"table too short", [](StepPlan& p) { p.seqs[0].layers[1].pages.pop_back(); },
       Kind::kInternal, "page table does not cover slot 19"},
      {"page written twice",
       [](StepPlan& p) { p.seqs[1].layers[0].pages.back() = p.seqs[0].layers[0].pages[0]; },
       Kind::kInternal, "written twice"},
      {"sample without params", [](StepPlan& p) { p.seqs[1].params = nullptr; }, Kind::kInternal,
       "sample without params/output"},
      {"action on a full layer",
       [](StepPlan& p) { p.seqs[0].layers[0].action = LayerAction::kSelect; }, Kind::kInternal,
       "a full layer takes no sparsity action"},
      {"bad sparse rule",
       [](StepPlan& p) {
         p.seqs[1].layers[1].rule = scored(64);
         p.seqs[1].layers[1].rule.capacity = 20;
       },
       Kind::kInternal, "inconsistent sparse rule"},
      {"bad decode state",
       [](StepPlan& p) {
         p.seqs[1].layers[1].rule = scored(64);
         p.seqs[1].layers[1].valid = 65;
       },
       Kind::kInternal, "exceeds the capacity"},
      {"kSelect in a decode",
       [](StepPlan& p) {
         p.seqs[1].layers[1].rule = scored(64);
         p.seqs[1].layers[1].valid = 10;
         p.seqs[1].layers[1].action = LayerAction::kSelect;
       },
       Kind::kInternal, "kSelect outside the prefill"},
      {"prompt > C without temp pages, not whole",
       [](StepPlan& p) {
         p.seqs[0].layers[1].rule = scored(16 + 32 + 4);
         p.seqs[0].prompt_len = 100;
       },
       Kind::kInternal, "without temp pages"},
      {"shrink too far",
       [](StepPlan& p) {
         p.seqs[1].layers[1].rule = scored(64);
         p.seqs[1].layers[1].valid = 10;
         p.seqs[1].layers[1].action = LayerAction::kShrink;
         p.seqs[1].layers[1].shrink_to = 36;
       },
       Kind::kInternal, "kShrink to 36"},
      {"too many sequences",
       [](StepPlan& p) {
         Pages pg{1000};
         p.seqs.clear();
         for (int i = 0; i < 9; ++i) p.seqs.push_back(decode(pg, i, 0));
         for (auto& s : p.seqs)
           for (auto& ls : s.layers) ls.pages = {0};
       },
       Kind::kInternal, "9 sequences, the backend runs at most 8"},
      {"too many tokens",
       [](StepPlan& p) {
         Pages pg{100};
         p.seqs[0] = prefill(pg, 1, 0, 257, 257, true);
       },
       Kind::kInternal, "258 tokens, the backend runs at most 256"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Pages pg;
    StepPlan plan;
    plan.seqs.push_back(prefill(pg, 1, 0, 20, 20, true));
    plan.seqs.push_back(decode(pg, 2, 30));
    ASSERT_NO_THROW(build(plan));
    c.edit(plan);
    try {
      build(plan);
      ADD_FAILURE() << "no error";
    } catch (const InvalidRequest& e) {
      EXPECT_EQ(c.kind, Kind::kInvalidRequest) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
    } catch (const InternalError& e) {
      EXPECT_EQ(c.kind, Kind::kInternal) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
    }
  }
}

// The prefill scratch is counted: two whole-prompt selections that need more scratch pages
// than the backend has fail before anything is uploaded.
TEST_F(StepLayoutTest, PrefillScratchExhausted) {
  StepLimits lim = test_limits();
  lim.scratch_pages = 12;
  StepPlanner planner(lim);
  Pages pg;
  StepPlan plan;
  for (int i = 0; i < 2; ++i) {
    SeqStep s = prefill(pg, static_cast<std::uint64_t>(i), 0, 120, 120, true);
    s.layers[1].rule = scored(64);
    s.layers[1].pages = pg.take(pages_for_slots(64));
    s.layers[1].action = LayerAction::kSelect;
    plan.seqs.push_back(s);
  }
  StepLayout out;
  try {  // 8 + 8 pages > 12
    planner.build(plan, {}, image_, out);
    ADD_FAILURE() << "no error";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("prefill scratch exhausted"), std::string::npos)
        << e.what();
  }
  plan.seqs.pop_back();
  EXPECT_NO_THROW(planner.build(plan, {}, image_, out));
  EXPECT_TRUE(out.sparse.any);
}

}  // namespace
}  // namespace strata::cuda
