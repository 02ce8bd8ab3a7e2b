#include "tools/bench/quality.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/cpu_backend.h"
#include "runtime/make_model.h"
#include "runtime/model_loader.h"
#include "runtime/tokenizer.h"

namespace strata::bench {
namespace {

class Quality : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    MakeModelOptions o;
    o.out_dir = ::testing::TempDir() + "/strata_quality_model" + "." + std::to_string(::getpid());
    std::filesystem::remove_all(o.out_dir);
    o.layers = 3;
    make_model(o);
    weights_ = std::shared_ptr<const ModelWeights>(ModelWeights::load(o.out_dir));
    tok_ = Tokenizer::load(weights_->tokenizer_json(), weights_->tokenizer_config_json()).release();
    CpuBackendOptions bo;
    bo.threads = 2;
    bo.kv_bytes = 64ull << 20;
    backend_ = make_cpu_backend(weights_, bo).release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    delete tok_;
    weights_.reset();
  }
  static SparsityProfile profile(Policy p, int capacity, int full_layers) {
    SparsityProfile s;
    s.enabled = true;
    s.policy = p;
    s.capacity = capacity;
    s.full_layers = full_layers;
    s.window = 8;
    s.sinks = 4;
    return s;
  }
  static inline std::shared_ptr<const ModelWeights> weights_;
  static inline Tokenizer* tok_ = nullptr;
  static inline Backend* backend_ = nullptr;
};

TEST_F(Quality, EvalSetShapes) {
  const auto set = make_eval_set(*tok_, 96, 2, 3, 16, 7);
  ASSERT_EQ(set.documents.size(), 2u);
  EXPECT_EQ(set.documents[0].ids.size(), 96u + 16u);
  EXPECT_EQ(set.documents[0].prefill_len, 96);
  ASSERT_EQ(set.retrieval_window.size(), 3u);
  ASSERT_EQ(set.retrieval_followup.size(), 3u);
  // Same sequence, two modes: question prefilled vs question decoded after the compression.
  EXPECT_EQ(set.retrieval_window[1].ids, set.retrieval_followup[1].ids);
  EXPECT_GT(set.retrieval_window[1].prefill_len, 96);
  EXPECT_EQ(set.retrieval_followup[1].prefill_len, 96);
  EXPECT_FALSE(set.retrieval_window[1].answer.empty());
  // The answer rows predict the digits at the end of the sequence.
  EXPECT_EQ(set.retrieval_window[1].answer.back() + 2,
            static_cast<int>(set.retrieval_window[1].ids.size()));
  // Deterministic in the seed.
  EXPECT_EQ(make_eval_set(*tok_, 96, 2, 3, 16, 7).documents[1].ids, set.documents[1].ids);
  EXPECT_NE(make_eval_set(*tok_, 96, 2, 3, 16, 8).documents[1].ids, set.documents[1].ids);
}

TEST_F(Quality, CompressionMatchesTheCacheAccountingFormula) {
  const auto& m = backend_->model();  // 3 layers
  // scored, 1 full layer, C = 32, 100 prefilled + 20 decoded: full 3*120 slots; held 120 + 2*32.
  EXPECT_DOUBLE_EQ(cache_compression(m, profile(Policy::kScored, 32, 1), 100, 120),
                   360.0 / (120 + 64));
  EXPECT_DOUBLE_EQ(cache_compression(m, profile(Policy::kWindow, 32, 1), 100, 120),
                   360.0 / (120 + 64));
  // snapkv appends every generated token: C + 20 per sparse layer.
  EXPECT_DOUBLE_EQ(cache_compression(m, profile(Policy::kSnapKv, 32, 1), 100, 120),
                   360.0 / (120 + 2 * 52));
  EXPECT_DOUBLE_EQ(cache_compression(m, SparsityProfile{}, 100, 120), 1.0);
  // Capacity above the length keeps everything.
  EXPECT_DOUBLE_EQ(cache_compression(m, profile(Policy::kScored, 200, 0), 100, 120), 1.0);
}

TEST_F(Quality, FullVsItselfIsZeroChangeAndLargeCapacityEqualsFull) {
  const auto set = make_eval_set(*tok_, 64, 1, 2, 16, 3);
  const auto ref = evaluate(*backend_, set, SparsityProfile{}, nullptr);
  EXPECT_GT(ref.ppl, 1.0);
  const auto again = evaluate(*backend_, set, SparsityProfile{}, &ref);
  EXPECT_EQ(again.nll, ref.nll);
  EXPECT_EQ(again.agreement, 1.0);
  EXPECT_EQ(again.compression, 1.0);
  // Every capacity above the sequence: sparse policies are exact (bit-identical logits).
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored}) {
    const auto s = evaluate(*backend_, set, profile(p, 512, 1), &ref);
    EXPECT_EQ(s.nll, ref.nll) << to_string(p);
    EXPECT_EQ(s.agreement, 1.0) << to_string(p);
    EXPECT_EQ(s.retrieval_window, ref.retrieval_window);
  }
  // A real compression changes the continuation's logits and reports its ratio.
  const auto s = evaluate(*backend_, set, profile(Policy::kScored, 16, 1), &ref);
  EXPECT_NE(s.nll, ref.nll);
  EXPECT_GT(s.compression, 1.5);
  EXPECT_NEAR(s.sparse_compression, 64.0 / 16.0, 1e-12);
}

}  // namespace
}  // namespace strata::bench
