#include "tools/bench/quality.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "runtime/teacher_forcing.h"
#include "runtime/text/tokenizer.h"

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

// The held-out rule and name lists are synth.py's: the values below were computed there
// (tools/evalmodel/synth.py: fnv1a64, heldout_name, FIRST_NAMES x LAST_NAMES).
TEST(EvalFormat, HeldOutNamesAreTheTrainingDataGeneratorsOnes) {
  EXPECT_EQ(fnv1a64("Alice Abbott"), 0xe45743fb2f0298c5ull);
  const auto names = heldout_names();
  ASSERT_EQ(names.size(), 1559u);
  EXPECT_EQ(names[0], "Alice Barros");
  EXPECT_EQ(names[1], "Alice Evans");
  EXPECT_EQ(names[2], "Alice Ferreira");
  for (const auto& n : names) EXPECT_EQ(fnv1a64(n) % 7, 0u) << n;
}

TEST_F(Quality, RetrievalContextsHoldFourFactsAboutHeldOutNamesAndAskOne) {
  EvalFormat f;
  for (int i = 0; i < 4000; ++i) f.filler.push_back(1 + i % 200);  // stand-in "held-out text"
  const auto set = make_eval_set(*tok_, 1024, 1, 2, 16, 11, f);
  const auto held = heldout_names();
  for (int r = 0; r < 2; ++r) {
    const auto& c = set.retrieval_window[static_cast<std::size_t>(r)];
    const std::string text = tok_->decode(c.ids);
    int facts = 0;
    for (auto at = text.find("The secret number of "); at != std::string::npos;
         at = text.find("The secret number of ", at + 1)) {
      const auto name_at = at + std::strlen("The secret number of ");
      const auto end = text.find(" is", name_at);
      ASSERT_NE(end, std::string::npos);
      EXPECT_NE(std::find(held.begin(), held.end(), text.substr(name_at, end - name_at)),
                held.end())
          << text.substr(name_at, end - name_at);
      ++facts;
    }
    EXPECT_EQ(facts, 4 + 1) << "four facts and the answer prefix";  // "Answer: The secret ..."
    EXPECT_NE(text.find(r == 0 ? "\nQuestion: what is the secret number of "
                               : "\nQuestion: which secret number was given to "),
              std::string::npos);
  }
  // The documents are slices of the filler.
  const auto& d = set.documents[0].ids;
  ASSERT_EQ(d.size(), 1024u + 16u);
  for (std::size_t i = 1; i < d.size(); ++i)
    if (d[i - 1] != 200) {
      EXPECT_EQ(d[i], d[i - 1] + 1) << i;
    }
  // A context too small for four facts keeps fewer, the asked one always.
  const auto small = make_eval_set(*tok_, 96, 0, 1, 16, 3, f);
  EXPECT_NE(tok_->decode(small.retrieval_window[0].ids).find("The secret number of "),
            std::string::npos);
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

// The shared prefill (one full-cache prefill per token sequence, then each run's final chunk
// with kSelect and its decode steps, runs batched as sequences of one step) gives logits
// bit-identical to running each profile from scratch — for every policy, with and without
// full layers, for both retrieval modes (two prefill lengths over the same ids), batched or
// one run per step.
TEST_F(Quality, SharedPrefillIsBitIdenticalToFromScratch) {
  const auto set = make_eval_set(*tok_, 200, 0, 1, 16, 5);
  const auto& ids = set.retrieval_window[0].ids;
  const int p_window = set.retrieval_window[0].prefill_len;
  const int p_followup = set.retrieval_followup[0].prefill_len;
  ASSERT_EQ(set.retrieval_followup[0].ids, ids);
  std::vector<SparsityProfile> profiles{SparsityProfile{}};
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored})
    for (int fl : {0, 1}) profiles.push_back(profile(p, 40, fl));
  profiles.push_back(profile(Policy::kScored, 100, 1));  // capacity 100 < 200: still kSelect
  profiles.push_back(profile(Policy::kScored, 512, 0));  // holds the whole prompt: from scratch
  std::vector<ForcedRun> runs;
  for (int prefill : {p_followup, p_window})
    for (std::size_t i = 0; i < profiles.size(); ++i)
      runs.push_back({static_cast<int>(i), prefill});
  const auto vocab = static_cast<std::size_t>(backend_->model().vocab_size);
  for (int max_batch : {0, 1}) {
    const auto shared = shared_teacher_forcing(*backend_, ids, profiles, runs, max_batch);
    ASSERT_EQ(shared.size(), runs.size());
    int differs_from_full = 0;
    std::vector<float> full_followup;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      const auto& r = runs[i];
      const auto& pr = profiles[static_cast<std::size_t>(r.profile)];
      const auto scratch = teacher_forced_logits(*backend_, ids, pr, r.prefill_len);
      const auto& got = shared[i];
      SCOPED_TRACE("run " + std::to_string(i) + " (" + to_string(pr.policy) + ", " +
                   std::to_string(pr.full_layers) + " full, capacity " +
                   std::to_string(pr.capacity) + ", prefill " + std::to_string(r.prefill_len) +
                   ", max_batch " + std::to_string(max_batch) + ")");
      const bool from_scratch = r.profile == static_cast<int>(profiles.size()) - 1;
      if (from_scratch) {
        EXPECT_EQ(got.first_row, 0);
      } else {
        // Sharing happened: a whole number of pages before the last window, and every row the
        // measures read (>= prefill_len - 1) is there.
        EXPECT_GT(got.first_row, 0);
        EXPECT_EQ(got.first_row % kBlockSize, 0);
        EXPECT_LE(got.first_row, r.prefill_len - 8);
      }
      const std::size_t off = static_cast<std::size_t>(got.first_row) * vocab;
      ASSERT_EQ(got.logits.size(), scratch.size() - off);
      EXPECT_EQ(
          std::memcmp(got.logits.data(), scratch.data() + off, got.logits.size() * sizeof(float)),
          0);
      // The comparison is not vacuous: compressing changes the decode rows' logits.
      const std::size_t last = (ids.size() - 1) * vocab;
      if (r.profile == 0 && r.prefill_len == p_followup)
        full_followup.assign(scratch.begin() + static_cast<std::ptrdiff_t>(last), scratch.end());
      if (r.prefill_len == p_followup && r.profile > 0 && !from_scratch &&
          !std::equal(full_followup.begin(), full_followup.end(),
                      scratch.begin() + static_cast<std::ptrdiff_t>(last)))
        ++differs_from_full;
    }
    EXPECT_GE(differs_from_full, 6);
  }
}

TEST_F(Quality, SharedAndPerProfileEvaluationGiveTheSameScores) {
  const auto set = make_eval_set(*tok_, 160, 1, 2, 12, 9);
  std::vector<SparsityProfile> profiles{SparsityProfile{}, SparsityProfile{}};
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored})
    profiles.push_back(profile(p, 32, 1));
  EvalRunOptions shared, scratch;
  scratch.share_prefill = false;
  int calls = 0;
  shared.progress = [&](int done, int total) {
    ++calls;
    EXPECT_LE(done, total);
    EXPECT_EQ(total, 1 + 2 * 2);
  };
  const auto a = evaluate_profiles(*backend_, set, profiles, 0, shared);
  const auto b = evaluate_profiles(*backend_, set, profiles, 0, scratch);
  EXPECT_EQ(calls, 3);  // one document, two retrieval facts (both modes share their ids)
  ASSERT_EQ(a.size(), profiles.size());
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    SCOPED_TRACE("profile " + std::to_string(i));
    EXPECT_EQ(a[i].nll, b[i].nll);
    EXPECT_EQ(a[i].agreement, b[i].agreement);
    EXPECT_EQ(a[i].retrieval_window, b[i].retrieval_window);
    EXPECT_EQ(a[i].retrieval_followup, b[i].retrieval_followup);
    EXPECT_EQ(a[i].compression, b[i].compression);
    EXPECT_EQ(a[i].argmax, b[i].argmax);
    // And the one-profile from-scratch evaluate() agrees too.
    const auto one = evaluate(*backend_, set, profiles[i], &b[0]);
    EXPECT_EQ(one.nll, a[i].nll);
    EXPECT_EQ(one.agreement, a[i].agreement);
  }
  // The full cache against itself: zero change.
  EXPECT_EQ(a[1].nll, a[0].nll);
  EXPECT_EQ(a[1].agreement, 1.0);
  EXPECT_EQ(a[0].compression, 1.0);
  EXPECT_GT(a[2].compression, 1.5);
}

TEST_F(Quality, SharedTeacherForcingRejectsBadRuns) {
  const std::vector<std::int32_t> ids(64, 5);
  const std::vector<SparsityProfile> profiles{SparsityProfile{}};
  EXPECT_THROW(shared_teacher_forcing(*backend_, ids, profiles, {{1, 10}}), InvalidRequest);
  EXPECT_THROW(shared_teacher_forcing(*backend_, ids, profiles, {{0, 65}}), InvalidRequest);
  EXPECT_THROW(shared_teacher_forcing(*backend_, ids, profiles, {{0, 0}}), InvalidRequest);
  EXPECT_THROW(shared_teacher_forcing(*backend_, {}, profiles, {{0, 1}}), InvalidRequest);
}

}  // namespace
}  // namespace strata::bench
