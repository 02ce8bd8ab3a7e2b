#include "runtime/step_plan_check.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace strata {
namespace {

// Layer 0 full, layer 1 `scored` (C = 24, sinks 2, α = 4); 64 pages, vocabulary 100.
constexpr int kVocab = 100, kPages = 64;
const StepPlanLimits kLimits{2, kVocab, kPages, 4, 256, 512};

LayerRule scored() {
  LayerRule r;
  r.policy = Policy::kScored;
  r.capacity = 24;
  r.sinks = 2;
  r.window = 4;
  r.ring = 4;
  r.pool_kernel = 3;
  return r;
}

LayerRule window_rule() {
  LayerRule r = scored();
  r.policy = Policy::kWindow;
  r.ring = r.capacity - r.sinks;
  return r;
}

LayerSlots layer(LayerRule rule, int valid, std::vector<std::int32_t> pages) {
  LayerSlots ls;
  ls.rule = rule;
  ls.valid = valid;
  ls.pages = std::move(pages);
  return ls;
}

SeqStep seq(std::uint64_t id, int start, int n, int prompt_len, bool prefill) {
  SeqStep s;
  s.seq_id = id;
  s.start = start;
  s.prompt_len = prompt_len;
  s.prefill = prefill;
  for (int i = 0; i < n; ++i) s.tokens.push_back((start + i) % kVocab);
  return s;
}

// Sequence 1: the whole 10-token prompt (fits the sparse layer's capacity). Pages 0, 1.
SeqStep short_prefill() {
  SeqStep s = seq(1, 0, 10, 10, true);
  s.layers = {layer(LayerRule{}, 0, {0}), layer(scored(), 0, {1})};
  return s;
}

// Sequence 2: chunk [0, 20) of a 40-token prompt (longer than C): temp pages. Pages 2-5.
SeqStep long_first_chunk() {
  SeqStep s = seq(2, 0, 20, 40, true);
  s.layers = {layer(LayerRule{}, 0, {2, 3}), layer(scored(), 0, {})};
  s.layers[1].temp_pages = {4, 5};
  return s;
}

// Sequence 3: the final chunk [20, 40) of a 40-token prompt with kSelect. Pages 6-13.
SeqStep long_final_chunk() {
  SeqStep s = seq(3, 20, 20, 40, true);
  s.layers = {layer(LayerRule{}, 20, {6, 7, 8}), layer(scored(), 0, {9, 10})};
  s.layers[1].temp_pages = {11, 12, 13};
  s.layers[1].action = LayerAction::kSelect;
  return s;
}

// Sequence 4: a decode at position 40, the sparse layer's ring full (ring_pos 1). Pages 14-18.
SeqStep decode(std::uint64_t id = 4) {
  SeqStep s = seq(id, 40, 1, 40, false);
  s.layers = {layer(LayerRule{}, 40, {14, 15, 16}), layer(scored(), 24, {17, 18})};
  s.layers[1].ring_pos = 1;
  return s;
}

StepPlan good_plan() {
  StepPlan p;
  p.seqs = {short_prefill(), long_first_chunk(), long_final_chunk(), decode()};
  return p;
}

enum class Expect { kInvalidRequest, kInternalError };

struct Violation {
  const char* what;
  const char* needle;  // in the error's message
  std::function<void(StepPlan&)> edit;
  Expect expect;
};

TEST(StepPlanCheck, GoodPlansPass) {
  EXPECT_NO_THROW(validate_step_plan(good_plan(), kLimits));
  EXPECT_NO_THROW(validate_step_plan(StepPlan{}, kLimits));
  StepPlan p;
  p.seqs = {seq(5, 0, 30, 30, true)};  // the whole long prompt, backend scratch, kSelect
  p.seqs[0].layers = {layer(LayerRule{}, 0, {0, 1}), layer(scored(), 0, {2, 3})};
  p.seqs[0].layers[1].action = LayerAction::kSelect;
  EXPECT_NO_THROW(validate_step_plan(p, kLimits));
  p = StepPlan{};
  p.seqs = {decode()};
  p.seqs[0].layers[1].action = LayerAction::kShrink;
  p.seqs[0].layers[1].shrink_to = 12;
  EXPECT_NO_THROW(validate_step_plan(p, kLimits));
  // snapkv appends past its capacity (the planner reserved C + max_tokens).
  p = StepPlan{};
  p.seqs = {decode()};
  p.seqs[0].layers[1].rule.policy = Policy::kSnapKv;
  p.seqs[0].layers[1].rule.ring = 0;
  p.seqs[0].layers[1].ring_pos = 0;
  p.seqs[0].layers[1].valid = 30;
  EXPECT_NO_THROW(validate_step_plan(p, kLimits));
  // Zero limits are no limits. Pages not written this step may be shared (read-only): the
  // two full layers share pages 0-30 and write their own last two.
  StepPlanLimits open = kLimits;
  open.max_seqs = open.max_tokens = open.max_positions = 0;
  StepPlan q;
  q.seqs = {seq(30, 500, 20, 600, true)};
  q.seqs[0].layers = {layer(LayerRule{}, 500, {}), layer(LayerRule{}, 500, {})};
  for (int pg = 0; pg < 33; ++pg) q.seqs[0].layers[0].pages.push_back(pg);
  q.seqs[0].layers[1].pages = q.seqs[0].layers[0].pages;
  q.seqs[0].layers[1].pages[31] = 40;
  q.seqs[0].layers[1].pages[32] = 41;
  EXPECT_NO_THROW(validate_step_plan(q, open));
  EXPECT_THROW(validate_step_plan(q, kLimits), InvalidRequest);  // 520 > 512 positions
}

// Every violation of the contract, each with the one error type it gets on every backend:
// InvalidRequest for what came from a request, InternalError for engine bugs.
TEST(StepPlanCheck, EachViolationHasOneErrorType) {
  using E = Expect;
  const std::vector<Violation> table = {
      // From the request.
      {"prefill token == vocab", "outside the vocabulary",
       [](StepPlan& p) { p.seqs[0].tokens[3] = kVocab; }, E::kInvalidRequest},
      {"negative prefill token", "outside the vocabulary",
       [](StepPlan& p) { p.seqs[1].tokens[0] = -1; }, E::kInvalidRequest},
      {"decode token outside the vocabulary", "outside the vocabulary",
       [](StepPlan& p) { p.seqs[3].tokens[0] = 1000; }, E::kInvalidRequest},
      {"sequence past max_positions", "exceeds the backend's 512 positions",
       [](StepPlan& p) {
         auto& s = p.seqs[3];
         s.start = s.layers[0].valid = 512;
         s.layers[0].pages.resize(33, 40);
         for (int i = 0; i < 33; ++i) s.layers[0].pages[static_cast<std::size_t>(i)] = 19 + i;
       },
       E::kInvalidRequest},
      // Step shape.
      {"more sequences than max_seqs", "5 sequences, the backend runs at most 4",
       [](StepPlan& p) { p.seqs.push_back(decode(9)); }, E::kInternalError},
      {"more tokens than max_tokens", "341 tokens, the backend runs at most 256",
       [](StepPlan& p) {
         auto& s = p.seqs[0];
         s.prompt_len = 300;
         for (int i = 10; i < 300; ++i) s.tokens.push_back(1);
         s.layers[0].pages.clear();
         s.layers[1].rule = LayerRule{};
         s.layers[1].pages.clear();
         for (int i = 0; i < 19; ++i) s.layers[0].pages.push_back(19 + i);
         for (int i = 0; i < 19; ++i) s.layers[1].pages.push_back(38 + i);
       },
       E::kInternalError},
      {"missing layer state", "1 layer states for 2 layers",
       [](StepPlan& p) { p.seqs[2].layers.pop_back(); }, E::kInternalError},
      {"no tokens", "0 tokens in a prefill chunk", [](StepPlan& p) { p.seqs[0].tokens.clear(); },
       E::kInternalError},
      {"two tokens in a decode", "2 tokens in a decode step",
       [](StepPlan& p) { p.seqs[3].tokens.push_back(1); }, E::kInternalError},
      {"chunk past the prompt", "chunk [0, 10) outside the prompt of 9",
       [](StepPlan& p) { p.seqs[0].prompt_len = 9; }, E::kInternalError},
      {"negative start", "chunk [-1, 9) outside the prompt of 10",
       [](StepPlan& p) { p.seqs[0].start = -1; }, E::kInternalError},
      {"sample without params", "sample without params/output",
       [](StepPlan& p) { p.seqs[3].sample = true; }, E::kInternalError},
      // Page tables.
      {"page id == num_pages", "page id 64 outside the pool of 64",
       [](StepPlan& p) { p.seqs[0].layers[0].pages[0] = kPages; }, E::kInternalError},
      {"negative page id", "page id -2 outside the pool of 64",
       [](StepPlan& p) { p.seqs[3].layers[1].pages[1] = -2; }, E::kInternalError},
      {"temp page outside the pool", "page id 99 outside the pool of 64",
       [](StepPlan& p) { p.seqs[1].layers[1].temp_pages[1] = 99; }, E::kInternalError},
      {"page written by two sequences", "is written twice in one step",
       [](StepPlan& p) { p.seqs[1].layers[0].pages[1] = p.seqs[0].layers[0].pages[0]; },
       E::kInternalError},
      {"page written by two layers", "is written twice in one step",
       [](StepPlan& p) { p.seqs[3].layers[1].pages[0] = p.seqs[3].layers[0].pages[2]; },
       E::kInternalError},
      {"temp page shared with the table", "is written twice in one step",
       [](StepPlan& p) { p.seqs[2].layers[1].temp_pages[2] = p.seqs[2].layers[1].pages[0]; },
       E::kInternalError},
      {"full table too short for the chunk", "page table does not cover slot 19",
       [](StepPlan& p) { p.seqs[1].layers[0].pages.pop_back(); }, E::kInternalError},
      {"full table too short for the decode", "page table does not cover slot 40",
       [](StepPlan& p) { p.seqs[3].layers[0].pages.pop_back(); }, E::kInternalError},
      {"sparse table too short for the decode slot", "page table does not cover slot 21",
       [](StepPlan& p) { p.seqs[3].layers[1].pages.pop_back(); }, E::kInternalError},
      {"temp pages too short", "temp pages do not cover slot 39",
       [](StepPlan& p) { p.seqs[2].layers[1].temp_pages.pop_back(); }, E::kInternalError},
      {"kSelect table short of the capacity", "page table does not cover the capacity",
       [](StepPlan& p) { p.seqs[2].layers[1].pages.pop_back(); }, E::kInternalError},
      // Valid slots.
      {"prefill: valid disagrees with start", "holds 19 slots, chunk starts at 20",
       [](StepPlan& p) { p.seqs[2].layers[0].valid = 19; }, E::kInternalError},
      {"full decode: valid disagrees with start", "holds 39 slots, decode at position 40",
       [](StepPlan& p) { p.seqs[3].layers[0].valid = 39; }, E::kInternalError},
      {"slots before the selection", "holds 3 slots before its selection",
       [](StepPlan& p) { p.seqs[2].layers[1].valid = 3; }, E::kInternalError},
      {"sparse decode: valid above the capacity", "valid 25 exceeds the capacity 24",
       [](StepPlan& p) { p.seqs[3].layers[1].valid = 25; }, E::kInternalError},
      {"sparse decode: negative valid", "negative valid -1",
       [](StepPlan& p) { p.seqs[3].layers[1].valid = -1; }, E::kInternalError},
      // Rules and ring positions.
      {"scored ring != window", "inconsistent sparse rule",
       [](StepPlan& p) { p.seqs[3].layers[1].rule.ring = 3; }, E::kInternalError},
      {"window ring != C - sinks", "inconsistent sparse rule",
       [](StepPlan& p) {
         p.seqs[3].layers[1].rule = window_rule();
         p.seqs[3].layers[1].rule.ring = 4;
       },
       E::kInternalError},
      {"capacity below sinks + window + 1", "inconsistent sparse rule",
       [](StepPlan& p) { p.seqs[0].layers[1].rule.capacity = 6; }, E::kInternalError},
      {"even pool kernel", "inconsistent sparse rule",
       [](StepPlan& p) { p.seqs[0].layers[1].rule.pool_kernel = 4; }, E::kInternalError},
      {"ring_pos past the ring", "ring_pos 4 outside the ring of 4",
       [](StepPlan& p) { p.seqs[3].layers[1].ring_pos = 4; }, E::kInternalError},
      {"negative ring_pos", "ring_pos -1 outside the ring of 4",
       [](StepPlan& p) { p.seqs[3].layers[1].ring_pos = -1; }, E::kInternalError},
      {"snapkv with a ring_pos", "ring_pos 1 outside the ring of 0",
       [](StepPlan& p) {
         p.seqs[3].layers[1].rule.policy = Policy::kSnapKv;
         p.seqs[3].layers[1].rule.ring = 0;
       },
       E::kInternalError},
      // Actions.
      {"kSelect on a full layer", "a full layer takes no sparsity action",
       [](StepPlan& p) { p.seqs[0].layers[0].action = LayerAction::kSelect; }, E::kInternalError},
      {"temp pages on a full layer", "a full layer takes no sparsity action",
       [](StepPlan& p) { p.seqs[0].layers[0].temp_pages = {30}; }, E::kInternalError},
      {"kShrink on a full layer", "a full layer takes no sparsity action",
       [](StepPlan& p) {
         p.seqs[3].layers[0].action = LayerAction::kShrink;
         p.seqs[3].layers[0].shrink_to = 12;
       },
       E::kInternalError},
      {"kSelect in a decode", "kSelect outside the prefill of a prompt",
       [](StepPlan& p) { p.seqs[3].layers[1].action = LayerAction::kSelect; }, E::kInternalError},
      {"kSelect on a prompt that fits", "kSelect outside the prefill of a prompt",
       [](StepPlan& p) { p.seqs[0].layers[1].action = LayerAction::kSelect; }, E::kInternalError},
      {"kSelect before the chunk ending the prompt", "kSelect needs the chunk ending the prompt",
       [](StepPlan& p) { p.seqs[1].layers[1].action = LayerAction::kSelect; }, E::kInternalError},
      {"kSelect chunk shorter than the window", "kSelect needs the chunk ending the prompt",
       [](StepPlan& p) {
         auto& s = p.seqs[2];
         s.start = 37;
         s.tokens.resize(3);
         s.layers[0].valid = 37;
       },
       E::kInternalError},
      {"long prompt split without temp pages", "without temp pages",
       [](StepPlan& p) { p.seqs[1].layers[1].temp_pages.clear(); }, E::kInternalError},
      {"final chunk of a long prompt without temp pages or kSelect", "without temp pages",
       [](StepPlan& p) {
         auto& s = p.seqs[2];
         s.layers[1].temp_pages.clear();
         s.layers[1].action = LayerAction::kNone;
       },
       E::kInternalError},
      {"kShrink to sinks + window", "kShrink to 6 slots",
       [](StepPlan& p) {
         p.seqs[3].layers[1].action = LayerAction::kShrink;
         p.seqs[3].layers[1].shrink_to = 6;
       },
       E::kInternalError},
  };
  ASSERT_NO_THROW(validate_step_plan(good_plan(), kLimits));
  StepPlanChecker checker(kLimits);  // one checker across the table, as a backend keeps it
  for (const auto& v : table) {
    StepPlan p = good_plan();
    v.edit(p);
    std::string got = "nothing";
    try {
      checker.check(p);
    } catch (const InvalidRequest& e) {
      got = "InvalidRequest";
      EXPECT_EQ(e.param(), "prompt") << v.what;
      EXPECT_NE(std::string(e.what()).find(v.needle), std::string::npos) << e.what();
    } catch (const InternalError& e) {
      got = "InternalError";
      EXPECT_NE(std::string(e.what()).find("step plan: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(v.needle), std::string::npos) << e.what();
    }
    EXPECT_EQ(got, v.expect == E::kInvalidRequest ? "InvalidRequest" : "InternalError") << v.what;
    // The checker is unharmed: the good plan passes right after.
    EXPECT_NO_THROW(checker.check(good_plan())) << "after " << v.what;
  }
}

// ---- The state rule --------------------------------------------------------------------

struct StateCase {
  const char* what;
  LayerSlots before;
  LayerStep step;
  int valid, ring_pos, capacity, ring;  // after advance_layer
};

TEST(StepPlanCheck, StateRuleTable) {
  LayerSlots full_layer = layer(LayerRule{}, 5, {0});
  LayerSlots ring_full = layer(scored(), 24, {0, 1});
  ring_full.ring_pos = 3;
  LayerSlots filling = layer(scored(), 10, {0});
  LayerSlots empty_sparse = layer(scored(), 0, {});
  LayerSlots win_full = layer(window_rule(), 24, {0, 1});
  win_full.ring_pos = 7;
  const std::vector<StateCase> table = {
      {"full decode appends", full_layer, {1, false, 5, false, 0}, 6, 0, 0, 0},
      {"full prefill chunk", full_layer, {7, true, 20, false, 0}, 12, 0, 0, 0},
      {"ring full: decode turns the ring", ring_full, {1, false, 30, false, 0}, 24, 0, 24, 4},
      {"sparse not full: decode appends", filling, {1, false, 10, false, 0}, 11, 0, 24, 4},
      {"prompt fits: prefill writes by position",
       empty_sparse,
       {10, true, 10, false, 0},
       10,
       0,
       24,
       4},
      {"long prompt, not final: unchanged", empty_sparse, {20, true, 40, false, 0}, 0, 0, 24, 4},
      {"long prompt, kSelect: the capacity", empty_sparse, {20, true, 40, true, 0}, 24, 0, 24, 4},
      {"scored shrink after a decode", ring_full, {1, false, 30, false, 12}, 12, 0, 12, 4},
      {"window shrink re-derives the ring", win_full, {1, false, 30, false, 12}, 12, 0, 12, 10},
      {"shrink above what the layer holds", filling, {1, false, 10, false, 16}, 11, 0, 16, 4},
  };
  for (const auto& c : table) {
    LayerSlots ls = c.before;
    advance_layer(ls, c.step);
    EXPECT_EQ(ls.valid, c.valid) << c.what;
    EXPECT_EQ(ls.ring_pos, c.ring_pos) << c.what;
    EXPECT_EQ(ls.rule.capacity, c.capacity) << c.what;
    EXPECT_EQ(ls.rule.ring, c.ring) << c.what;
    EXPECT_EQ(ls.pages, c.before.pages) << c.what;  // tables are the cache manager's business
    // The first half stops before the shrink.
    LayerSlots half = c.before;
    advance_layer_before_shrink(half, c.step);
    EXPECT_EQ(half.rule.capacity, c.before.rule.capacity) << c.what;
    if (c.step.shrink_to == 0) {
      EXPECT_EQ(half.valid, ls.valid) << c.what;
      EXPECT_EQ(half.ring_pos, ls.ring_pos) << c.what;
    }
  }
}

TEST(StepPlanCheck, LayerStepReadsTheAction) {
  const SeqStep fin = long_final_chunk();
  const LayerStep sel = layer_step(fin, fin.layers[1]);
  EXPECT_EQ(sel.n, 20);
  EXPECT_TRUE(sel.prefill);
  EXPECT_EQ(sel.prompt_len, 40);
  EXPECT_TRUE(sel.select);
  EXPECT_EQ(sel.shrink_to, 0);
  EXPECT_FALSE(layer_step(fin, fin.layers[0]).select);
  SeqStep d = decode();
  d.layers[1].action = LayerAction::kShrink;
  d.layers[1].shrink_to = 12;
  const LayerStep shr = layer_step(d, d.layers[1]);
  EXPECT_FALSE(shr.prefill);
  EXPECT_EQ(shr.n, 1);
  EXPECT_EQ(shr.shrink_to, 12);
  EXPECT_FALSE(shr.select);
  // shrink_to without the action is ignored.
  d.layers[1].action = LayerAction::kNone;
  EXPECT_EQ(layer_step(d, d.layers[1]).shrink_to, 0);
}

}  // namespace
}  // namespace strata
