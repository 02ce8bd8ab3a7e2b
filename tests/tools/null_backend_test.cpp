// The null backend of `strata bench host` (tools/bench/null_backend.h).
#include "tools/bench/null_backend.h"

#include <gtest/gtest.h>

#include "runtime/error.h"
#include "runtime/model/make_model.h"

namespace strata::bench {
namespace {

NullBackendOptions llama() {
  NullBackendOptions o;
  o.model = preset_config("llama3-8b");
  o.num_pages = 1000;
  o.token_lo = 100;
  o.token_hi = 200;
  return o;
}

SeqStep decode_step(std::uint64_t id, int start, std::int32_t first_page, int layers) {
  SeqStep s;
  s.seq_id = id;
  s.tokens = {42};
  s.start = start;
  s.prompt_len = start;
  s.prefill = false;
  s.sample = true;
  for (int l = 0; l < layers; ++l) {
    LayerSlots ls;
    ls.valid = start;
    for (int p = 0; p < pages_for_slots(start + 1); ++p) ls.pages.push_back(first_page++);
    s.layers.push_back(ls);
  }
  return s;
}

TEST(NullBackend, HasTheModelShapeAndReturnsDeterministicTokensInRange) {
  auto b = make_null_backend(llama());
  EXPECT_EQ(b->info().name, "null");
  EXPECT_EQ(b->info().num_pages, 1000);
  EXPECT_EQ(b->info().layout.kv_heads, 8);
  EXPECT_EQ(b->info().layout.head_dim, 128);
  EXPECT_EQ(b->model().num_hidden_layers, 32);
  StepPlan plan;
  plan.step_id = 7;
  plan.seqs.push_back(decode_step(1, 20, 0, 32));
  plan.seqs.push_back(decode_step(2, 40, 100, 32));
  SeqStep chunk = decode_step(3, 0, 300, 32);
  chunk.prefill = true;
  chunk.sample = false;
  chunk.tokens = {1, 2, 3};
  chunk.prompt_len = 10;
  plan.seqs.push_back(chunk);
  const StepResult r = b->step(plan);
  ASSERT_EQ(r.seqs.size(), 3u);
  EXPECT_EQ(r.step_id, 7u);
  EXPECT_EQ(r.stats.tokens, 5);
  EXPECT_EQ(r.stats.device_ms, 0.0);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.seqs[static_cast<std::size_t>(i)].seq_id,
              plan.seqs[static_cast<std::size_t>(i)].seq_id);
    EXPECT_GE(r.seqs[static_cast<std::size_t>(i)].token, 100);
    EXPECT_LT(r.seqs[static_cast<std::size_t>(i)].token, 200);
  }
  EXPECT_EQ(r.seqs[2].token, -1);  // not sampled
  EXPECT_EQ(b->step(plan).seqs[1].token, r.seqs[1].token);
}

TEST(NullBackend, RejectsPlansABackendMustReject) {
  auto b = make_null_backend(llama());
  StepPlan plan;
  plan.seqs.push_back(decode_step(1, 20, 995, 32));  // pages 995.. run past the pool
  EXPECT_THROW(b->step(plan), InternalError);
  plan.seqs[0] = decode_step(1, 20, 0, 31);  // a layer missing
  EXPECT_THROW(b->step(plan), InternalError);
  plan.seqs[0] = decode_step(1, 32, 0, 32);  // slot 32 needs a third page
  for (auto& ls : plan.seqs[0].layers) ls.pages.resize(2);
  EXPECT_THROW(b->step(plan), InternalError);
  plan.seqs[0] = decode_step(1, 20, 0, 32);
  plan.seqs[0].tokens = {128256};  // outside the vocabulary
  EXPECT_THROW(b->step(plan), InternalError);
}

TEST(NullBackend, ValidatesItsOptions) {
  auto o = llama();
  o.num_pages = 0;
  EXPECT_THROW(make_null_backend(o), ConfigError);
  o = llama();
  o.token_lo = 300;
  EXPECT_THROW(make_null_backend(o), ConfigError);
  o = llama();
  o.model.num_hidden_layers = 0;
  EXPECT_THROW(make_null_backend(o), ConfigError);
}

}  // namespace
}  // namespace strata::bench
