// A sequence that shares cached blocks and is preempted (recompute) computes the same bits as
// the same schedule without the prefix cache, for the full cache and each sparse policy: the
// cache manager and the CPU backend driven directly (the engine's scheduler cannot place a
// preemption at the same point in both runs, since the cache changes the free pages). Both
// admissions of the shared sequence hit (its prompt's blocks, then prompt + output's).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <random>

#include "cache/block_hash.h"
#include "cache/kv_cache_manager.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "tests/runtime/cpu_test_util.h"

namespace strata {
namespace {

struct Out {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int> cached;  // cached tokens at each admission
};

class Driver {
 public:
  Driver(const SparsityProfile& profile, bool cache) {
    CpuBackendOptions o;
    o.threads = 1;
    o.kv_bytes = 8ull << 20;
    backend_ = make_cpu_backend(ModelWeights::load(test::tiny3_model_dir()), o);
    m_ = std::make_unique<KvCacheManager>(backend_->model().num_hidden_layers,
                                          backend_->info().layout, backend_->info().num_pages,
                                          profile, PrefixCacheOptions{cache, -1});
  }

  // Greedy generation of max_tokens; preempted (freed, re-admitted with prompt + output) once
  // when `preempt_at` tokens are out. Prefill chunks of at most `chunk` tokens.
  Out generate(std::uint64_t id, const std::vector<std::int32_t>& prompt, int max_tokens,
               int preempt_at, int chunk) {
    Out out;
    SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    params.logprobs = 0;
    bool preempted = false;
    for (;;) {
      std::vector<std::int32_t> src = prompt;
      src.insert(src.end(), out.tokens.begin(), out.tokens.end());
      SeqSpec spec{static_cast<int>(src.size()), max_tokens - static_cast<int>(out.tokens.size()),
                   true, std::nullopt};
      spec.block_hashes = std::make_shared<const std::vector<BlockHash>>(
          block_hashes(prefix_root("tiny", ""), src.data(), src.size()));
      EXPECT_TRUE(m_->admit(id, spec));
      out.cached.push_back(m_->cached_tokens(id));
      bool stop = false;
      while (!stop) {
        if (!preempted && static_cast<int>(out.tokens.size()) == preempt_at) {
          preempted = true;
          m_->preempt(id);
          break;
        }
        StepPlan plan;
        plan.step_id = step_++;
        SeqStep st;
        st.seq_id = id;
        st.prompt_len = spec.prompt_len;
        st.start = m_->tokens(id);
        st.params = &params;
        st.prompt = &prompt;
        st.output = &out.tokens;
        if (!m_->prefill_done(id)) {
          const int n = m_->next_chunk_len(id, chunk);
          EXPECT_GT(n, 0);
          EXPECT_TRUE(m_->prepare_chunk(id, n, &st.layers));
          st.tokens.assign(src.begin() + st.start, src.begin() + st.start + n);
          st.prefill = true;
          st.sample = st.start + n == spec.prompt_len;
        } else {
          EXPECT_TRUE(m_->prepare_decode(id, &st.layers));
          st.tokens = {out.tokens.back()};
          st.prefill = false;
          st.sample = true;
        }
        plan.released_pages = m_->take_released();
        plan.seqs.push_back(std::move(st));
        const StepResult r = backend_->step(plan);
        m_->commit_step(id);
        m_->check_invariants();
        if (r.seqs[0].token >= 0) {
          out.tokens.push_back(r.seqs[0].token);
          out.logprobs.push_back(r.seqs[0].logprob);
          stop = static_cast<int>(out.tokens.size()) == max_tokens;
        }
      }
      if (stop) break;
    }
    m_->free(id);
    return out;
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCacheManager> m_;
  std::uint64_t step_ = 1;
};

struct Case {
  const char* name;
  bool sparse;
  Policy policy;
};

class PrefixCacheExact : public ::testing::TestWithParam<Case> {};

TEST_P(PrefixCacheExact, APreemptedSequenceSharingBlocksEqualsTheCacheOffRunBitwise) {
  const Case c = GetParam();
  SparsityProfile p;
  p.enabled = c.sparse;
  p.full_layers = 1;
  p.policy = c.policy;
  p.capacity = 32;
  p.window = 8;
  p.sinks = 2;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> tok(10, 199);
  std::vector<std::int32_t> shared(70), tail(25);
  for (auto& t : shared) t = tok(rng);
  for (auto& t : tail) t = tok(rng);
  auto prompt = shared;
  prompt.insert(prompt.end(), tail.begin(), tail.end());  // 95 tokens

  Driver off(p, false), on(p, true);
  const Out ref = off.generate(1, prompt, 20, /*preempt_at=*/7, /*chunk=*/24);
  (void)on.generate(1, shared, 4, -1, 40);  // fills the cache with the shared blocks
  const Out hit = on.generate(2, prompt, 20, 7, 24);
  EXPECT_EQ(hit.tokens, ref.tokens);
  ASSERT_EQ(hit.logprobs.size(), ref.logprobs.size());
  EXPECT_EQ(
      std::memcmp(hit.logprobs.data(), ref.logprobs.data(), ref.logprobs.size() * sizeof(float)),
      0);
  ASSERT_EQ(hit.cached.size(), 2u);
  // First admission: the shared 70 tokens' 4 full blocks (64); after the preemption the
  // re-admission (95 + 7 tokens) hits its own prompt's 5 blocks (80; a preemption inserts no
  // generated block, and the window leaves 102 - 8 = 94 -> 80 anyway).
  EXPECT_EQ(hit.cached[0], 64);
  EXPECT_EQ(hit.cached[1], 80);
  EXPECT_EQ(ref.cached, (std::vector<int>{0, 0}));
}

INSTANTIATE_TEST_SUITE_P(Profiles, PrefixCacheExact,
                         ::testing::Values(Case{"Full", false, Policy::kScored},
                                           Case{"Window", true, Policy::kWindow},
                                           Case{"SnapKv", true, Policy::kSnapKv},
                                           Case{"Scored", true, Policy::kScored}),
                         [](const auto& info) { return std::string(info.param.name); });

// Sequences stepped one at a time, interleaved as a test says, over one manager and the CPU
// backend (the manager's pool may be smaller than the backend's: page pressure on purpose).
class Interleaved {
 public:
  Interleaved(const SparsityProfile& profile, bool cache, int pages) {
    CpuBackendOptions o;
    o.threads = 1;
    o.kv_bytes = 8ull << 20;
    backend_ = make_cpu_backend(ModelWeights::load(test::tiny3_model_dir()), o);
    EXPECT_LE(pages, backend_->info().num_pages);
    m_ = std::make_unique<KvCacheManager>(backend_->model().num_hidden_layers,
                                          backend_->info().layout, pages, profile,
                                          PrefixCacheOptions{cache, -1});
    params_.temperature = 0.0f;
    params_.ignore_eos = true;
    params_.logprobs = 0;
  }
  KvCacheManager& m() { return *m_; }

  void admit(std::uint64_t id, const std::vector<std::int32_t>& prompt, int max_tokens) {
    Seq& q = seqs_[id];
    q.prompt = prompt;
    q.max_tokens = max_tokens;
    SeqSpec spec{static_cast<int>(prompt.size()), max_tokens, true, std::nullopt};
    spec.block_hashes = std::make_shared<const std::vector<BlockHash>>(
        block_hashes(prefix_root("tiny", ""), prompt.data(), prompt.size()));
    ASSERT_TRUE(m_->admit(id, spec));
    q.out.cached.push_back(m_->cached_tokens(id));
  }
  // One step of `id` (a prefill chunk of at most `chunk` tokens, or a decode); true when it
  // has generated everything (then it is freed).
  bool step(std::uint64_t id, int chunk = 32) {
    Seq& q = seqs_.at(id);
    StepPlan plan;
    plan.step_id = step_++;
    SeqStep st;
    st.seq_id = id;
    st.prompt_len = static_cast<int>(q.prompt.size());
    st.start = m_->tokens(id);
    st.params = &params_;
    st.prompt = &q.prompt;
    st.output = &q.out.tokens;
    if (!m_->prefill_done(id)) {
      const int n = m_->next_chunk_len(id, chunk);
      EXPECT_GT(n, 0);
      EXPECT_TRUE(m_->prepare_chunk(id, n, &st.layers));
      st.tokens.assign(q.prompt.begin() + st.start, q.prompt.begin() + st.start + n);
      st.prefill = true;
      st.sample = st.start + n == st.prompt_len;
    } else {
      EXPECT_TRUE(m_->prepare_decode(id, &st.layers));
      st.tokens = {q.out.tokens.back()};
      st.prefill = false;
      st.sample = true;
    }
    plan.released_pages = m_->take_released();
    plan.seqs.push_back(std::move(st));
    const StepResult r = backend_->step(plan);
    m_->commit_step(id);
    m_->check_invariants();
    if (r.seqs[0].token >= 0) {
      q.out.tokens.push_back(r.seqs[0].token);
      q.out.logprobs.push_back(r.seqs[0].logprob);
    }
    if (static_cast<int>(q.out.tokens.size()) < q.max_tokens) return false;
    m_->free(id);
    m_->check_invariants();
    return true;
  }
  Out run(std::uint64_t id, int chunk = 32) {
    while (!step(id, chunk)) {
    }
    return seqs_.at(id).out;
  }
  Out out(std::uint64_t id) const { return seqs_.at(id).out; }

 private:
  struct Seq {
    std::vector<std::int32_t> prompt;
    int max_tokens = 0;
    Out out;
  };
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<KvCacheManager> m_;
  SamplingParams params_;
  std::map<std::uint64_t, Seq> seqs_;
  std::uint64_t step_ = 1;
};

void expect_same_bits(const Out& a, const Out& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.logprobs.size(), b.logprobs.size());
  EXPECT_EQ(std::memcmp(a.logprobs.data(), b.logprobs.data(), a.logprobs.size() * sizeof(float)),
            0);
}

class PrefixCacheInUseEviction : public ::testing::TestWithParam<Case> {};

TEST_P(PrefixCacheInUseEviction, EvictingABlockInUseLeavesEveryOutputBitwiseTheCacheOffOne) {
  // A decodes its 200-token prompt (its sparse layers have selected: the cached blocks' sparse
  // pages are the table's alone); B, another prompt, needs more pages than are free, so its
  // prefill evicts A's blocks (tail first) while A runs; A goes on, finishes; C = A's prompt
  // again hits what is left. Every output equals the cache-off run's, bit for bit, and
  // nothing leaks.
  const Case c = GetParam();
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = 1;
  p.policy = c.policy;
  p.capacity = 32;
  p.window = 8;
  p.sinks = 2;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> tok(10, 199);
  std::vector<std::int32_t> a(200), b(200);
  for (auto& t : a) t = tok(rng);
  for (auto& t : b) t = tok(rng);

  Interleaved off(p, false, 400);  // each alone: the outputs do not depend on the schedule
  off.admit(1, a, 12);
  const Out ref_a = off.run(1);
  off.admit(2, b, 12);
  const Out ref_b = off.run(2);

  // 3 layers, a 200-token prompt: 13 full-layer pages + 2 x (13 temp + 2 or 3 own) pages; 12
  // blocks. 75 pages: B's reservation exceeds what is free while A decodes.
  Interleaved on(p, true, 75);
  on.admit(1, a, 12);
  for (int i = 0; i < 7 + 3; ++i) ASSERT_FALSE(on.step(1));  // 7 prefill chunks, 3 decodes
  auto st = on.m().stats();
  EXPECT_EQ(st.blocks_cached, 12);
  EXPECT_EQ(st.pages_evictable, 2 * 12);
  const int free_before = on.m().pool().free();
  on.admit(2, b, 12);  // admitted: the table-only pages count as available
  EXPECT_LT(free_before, on.m().usage(2).reserved_pages);
  while (!on.step(2)) {
    if (!on.m().contains(1)) continue;
    (void)on.step(1);  // A runs beside B's prefill
  }
  st = on.m().stats();
  EXPECT_GT(st.blocks_evicted_in_use, 0u);
  while (on.m().contains(1)) (void)on.step(1);
  EXPECT_EQ(on.m().stats().husks, 0);
  expect_same_bits(on.out(1), ref_a);
  expect_same_bits(on.out(2), ref_b);
  // C: A's prompt again: its head blocks that survived hit, the evicted tail does not.
  on.admit(3, a, 12);
  const int hit = on.out(3).cached[0];
  EXPECT_LT(hit, 12 * 16);
  EXPECT_EQ(hit, (12 - static_cast<int>(st.blocks_evicted_in_use)) * 16);
  expect_same_bits(on.run(3), ref_a);
  on.m().drop_unused_cache();
  EXPECT_EQ(on.m().pool().used(), 0);
  EXPECT_EQ(on.m().pages_reserved(), 0);
}

INSTANTIATE_TEST_SUITE_P(Profiles, PrefixCacheInUseEviction,
                         ::testing::Values(Case{"Window", true, Policy::kWindow},
                                           Case{"SnapKv", true, Policy::kSnapKv},
                                           Case{"Scored", true, Policy::kScored}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace strata
