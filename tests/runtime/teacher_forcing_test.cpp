#include "runtime/teacher_forcing.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"

namespace strata {
namespace {

ModelConfig tiny_model(int layers = 4, int vocab = 10) {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = vocab;
  return c;
}

SparsityProfile sparse_profile() {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = 1;
  p.capacity = 24;
  p.window = 4;
  p.sinks = 2;
  return p;
}

// Records the plans and checks the Backend preconditions a real backend enforces; returns
// logits row = position * 1000 + token * 10 + column so the order of rows is checkable.
class RecordingBackend : public Backend {
 public:
  RecordingBackend(ModelConfig m, int pages) : model_(std::move(m)) {
    info_.name = "recording";
    info_.num_pages = pages;
  }
  const BackendInfo& info() const override { return info_; }
  const ModelConfig& model() const override { return model_; }
  StepResult step(const StepPlan& plan) override {
    plans.push_back(plan);
    StepResult r;
    r.step_id = plan.step_id;
    for (const auto& s : plan.seqs) {
      std::set<int> used;
      for (const auto& l : s.layers) {
        for (int pg : l.pages) EXPECT_TRUE(used.insert(pg).second) << "page " << pg << " reused";
        for (int pg : l.temp_pages) EXPECT_TRUE(used.insert(pg).second) << "page " << pg;
      }
      for (int pg : used) EXPECT_LT(pg, info_.num_pages);
      SeqResult sr;
      sr.seq_id = s.seq_id;
      for (std::size_t i = 0; i < s.tokens.size(); ++i)
        for (int v = 0; v < model_.vocab_size; ++v)
          sr.logits.push_back(
              static_cast<float>((s.start + static_cast<int>(i)) * 1000 + s.tokens[i] * 10 + v));
      r.seqs.push_back(std::move(sr));
    }
    return r;
  }
  std::vector<StepPlan> plans;

 private:
  ModelConfig model_;
  BackendInfo info_;
};

TEST(TeacherForcing, OnePrefillWithFullLayersByDefault) {
  const auto m = tiny_model();
  const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8};
  RecordingBackend b(m, 100);
  const auto logits = teacher_forced_logits(b, ids, SparsityProfile{});
  ASSERT_EQ(b.plans.size(), 1u);
  const auto& s = b.plans[0].seqs[0];
  EXPECT_TRUE(s.prefill);
  EXPECT_TRUE(s.return_logits);
  EXPECT_FALSE(s.sample);
  EXPECT_EQ(s.start, 0);
  EXPECT_EQ(s.prompt_len, 17);
  EXPECT_EQ(s.tokens, ids);
  ASSERT_EQ(s.layers.size(), 4u);
  for (std::size_t l = 0; l < 4; ++l) {
    EXPECT_FALSE(s.layers[l].rule.sparse());
    EXPECT_EQ(s.layers[l].valid, 0);
    // 17 tokens -> 2 pages per layer, consecutive ids across layers.
    EXPECT_EQ(s.layers[l].pages,
              (std::vector<std::int32_t>{static_cast<int>(2 * l), static_cast<int>(2 * l + 1)}));
    EXPECT_TRUE(s.layers[l].temp_pages.empty());
    EXPECT_EQ(s.layers[l].action, LayerAction::kNone);
  }
  ASSERT_EQ(logits.size(), ids.size() * 10);
  EXPECT_EQ(logits[5 * 10 + 3], 5 * 1000 + ids[5] * 10 + 3);
  EXPECT_EQ(teacher_forcing_pages(m, 17, SparsityProfile{}), 8);
}

TEST(TeacherForcing, SparseLayersOverCapacitySelectFromTempPages) {
  const auto m = tiny_model();
  std::vector<std::int32_t> ids(40, 3);
  const auto prof = sparse_profile();
  EXPECT_EQ(teacher_forcing_pages(m, 40, prof), 3 + 3 * (2 + 3));  // full 40 slots; C=24 + temp 40
  RecordingBackend b(m, 18);
  teacher_forced_logits(b, ids, prof);
  ASSERT_EQ(b.plans.size(), 1u);
  const auto& layers = b.plans[0].seqs[0].layers;
  EXPECT_EQ(layers[0].action, LayerAction::kNone);
  EXPECT_EQ(layers[0].pages.size(), 3u);
  for (std::size_t l = 1; l < 4; ++l) {
    EXPECT_EQ(layers[l].rule.policy, Policy::kScored);
    EXPECT_EQ(layers[l].rule.capacity, 24);
    EXPECT_EQ(layers[l].action, LayerAction::kSelect);
    EXPECT_EQ(layers[l].pages.size(), 2u);       // capacity 24 -> 2 pages
    EXPECT_EQ(layers[l].temp_pages.size(), 3u);  // prompt 40 -> 3 pages
  }
  // A pool one page short is refused with the key to change.
  RecordingBackend small(m, 17);
  try {
    teacher_forced_logits(small, ids, prof);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "cache.cpu_kv_bytes");
  }
  // A prompt that fits the capacity is written directly.
  RecordingBackend fits(m, 100);
  teacher_forced_logits(fits, std::vector<std::int32_t>(20, 1), prof);
  for (const auto& l : fits.plans[0].seqs[0].layers) {
    EXPECT_EQ(l.action, LayerAction::kNone);
    EXPECT_TRUE(l.temp_pages.empty());
  }
}

TEST(TeacherForcing, DecodeTailAdvancesLayerStateLikeTheCacheManager) {
  const auto m = tiny_model();
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(i % 10);
  auto prof = sparse_profile();
  RecordingBackend b(m, 100);
  const auto logits = teacher_forced_logits(b, ids, prof, 30);
  ASSERT_EQ(b.plans.size(), 11u);  // prefill of 30, then 10 decodes
  ASSERT_EQ(logits.size(), 40u * 10);
  for (int t = 0; t < 40; ++t)
    EXPECT_EQ(logits[static_cast<std::size_t>(t) * 10], t * 1000 + ids[t] * 10);
  // Temp pages are released with the first decode step, and never appear again.
  std::set<int> temp(b.plans[0].seqs[0].layers[1].temp_pages.begin(),
                     b.plans[0].seqs[0].layers[1].temp_pages.end());
  ASSERT_EQ(temp.size(), 2u);
  for (int pg : temp)
    EXPECT_NE(std::find(b.plans[1].released_pages.begin(), b.plans[1].released_pages.end(), pg),
              b.plans[1].released_pages.end());
  EXPECT_TRUE(b.plans[2].released_pages.empty());
  for (std::size_t k = 1; k < b.plans.size(); ++k) {
    const auto& s = b.plans[k].seqs[0];
    const int t = 30 + static_cast<int>(k) - 1;
    EXPECT_FALSE(s.prefill);
    EXPECT_EQ(s.start, t);
    EXPECT_EQ(s.tokens, std::vector<std::int32_t>{ids[static_cast<std::size_t>(t)]});
    EXPECT_EQ(s.layers[0].valid, t);  // full layer: every position
    const auto& sp = s.layers[1];
    EXPECT_TRUE(sp.temp_pages.empty());
    EXPECT_EQ(sp.action, LayerAction::kNone);
    // scored, C = 24, ring = window = 4: full after the selection, ring turns over.
    EXPECT_EQ(sp.valid, 24);
    EXPECT_EQ(sp.ring_pos, static_cast<int>(k - 1) % 4);
    EXPECT_EQ(sp.decode_slot(), 20 + static_cast<int>(k - 1) % 4);
  }
  // snapkv appends after the selection: C + 10 slots = 34 -> 3 pages per sparse layer.
  prof.policy = Policy::kSnapKv;
  EXPECT_EQ(teacher_forcing_pages(m, 40, prof, 30), 3 + 3 * (3 + 2));
  RecordingBackend snap(m, 100);
  teacher_forced_logits(snap, ids, prof, 30);
  EXPECT_EQ(snap.plans.back().seqs[0].layers[2].valid, 24 + 9);
  EXPECT_EQ(snap.plans.back().seqs[0].layers[2].decode_slot(), 33);
}

TEST(TeacherForcing, RejectsBadIds) {
  const auto m = tiny_model();
  RecordingBackend b(m, 100);
  EXPECT_THROW(teacher_forced_logits(b, {}, SparsityProfile{}), InvalidRequest);
  EXPECT_THROW(teacher_forced_logits(b, {1, 10}, SparsityProfile{}), InvalidRequest);
  EXPECT_THROW(teacher_forced_logits(b, {1, -1}, SparsityProfile{}), InvalidRequest);
  EXPECT_THROW(teacher_forced_logits(b, {1, 2}, SparsityProfile{}, 3), InvalidRequest);
  EXPECT_TRUE(b.plans.empty());
}

// Relative L2 distance of row t of a and b ([n][vocab]).
double row_rel_l2(const std::vector<float>& a, const std::vector<float>& b, std::size_t t,
                  std::size_t vocab) {
  double num = 0, den = 0;
  for (std::size_t v = t * vocab; v < (t + 1) * vocab; ++v) {
    num += (static_cast<double>(a[v]) - b[v]) * (static_cast<double>(a[v]) - b[v]);
    den += static_cast<double>(b[v]) * b[v];
  }
  return std::sqrt(num / den);
}

// On the real CPU backend: a decode tail reproduces the one-prefill logits, sparsity cannot
// change prefill logits, and it does change the logits of decode positions.
TEST(TeacherForcing, CpuBackendPrefillDecodeAndSparsity) {
  const std::string dir =
      ::testing::TempDir() + "/strata_teacher_forcing_model" + "." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  MakeModelOptions mo;
  mo.out_dir = dir;
  mo.layers = 3;
  mo.dtype = DType::kF32;
  make_model(mo);
  std::shared_ptr<const ModelWeights> w = ModelWeights::load(dir);
  CpuBackendOptions bo;
  bo.threads = 2;
  bo.kv_bytes = 64ull << 20;
  auto be = make_cpu_backend(w, bo);
  const auto vocab = static_cast<std::size_t>(w->config().vocab_size);
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 96; ++i) ids.push_back(static_cast<std::int32_t>(splitmix64(i) % vocab));

  const auto full = teacher_forced_logits(*be, ids, SparsityProfile{});
  ASSERT_EQ(full.size(), ids.size() * vocab);
  const auto tail = teacher_forced_logits(*be, ids, SparsityProfile{}, 64);
  for (std::size_t t = 0; t < ids.size(); ++t)
    EXPECT_LT(row_rel_l2(tail, full, t, vocab), 1e-5) << "position " << t;

  SparsityProfile sp;
  sp.enabled = true;
  sp.full_layers = 1;
  sp.capacity = 32;
  sp.window = 8;
  sp.sinks = 4;
  const auto sparse_prefill = teacher_forced_logits(*be, ids, sp);
  for (std::size_t t = 0; t < ids.size(); ++t)
    EXPECT_LT(row_rel_l2(sparse_prefill, full, t, vocab), 1e-6) << "position " << t;

  const auto sparse_tail = teacher_forced_logits(*be, ids, sp, 64);
  for (std::size_t t = 0; t < 64; ++t)
    EXPECT_LT(row_rel_l2(sparse_tail, full, t, vocab), 1e-6) << "position " << t;
  double worst = 0;
  for (std::size_t t = 64; t < ids.size(); ++t)
    worst = std::max(worst, row_rel_l2(sparse_tail, full, t, vocab));
  EXPECT_GT(worst, 1e-4);  // 32 of 64+ tokens kept in two of three layers
}

}  // namespace
}  // namespace strata
