// Tensor parallelism on the CPU: sharding (runtime/tp/tp_shard.h), the in-process communicator
// (runtime/tp/tp_comm.h) and the CPU TP backend — TP=2 and TP=4 logits equal TP=1 logits
// on the same random weights, teacher-forced, sparsity off and on.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <future>
#include <thread>

#include "runtime/error.h"
#include "runtime/teacher_forcing.h"
#include "runtime/tp/tp_comm.h"
#include "runtime/tp/tp_group.h"
#include "runtime/tp/tp_shard.h"
#include "tests/runtime/cpu_test_util.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata {
namespace {

using test::PageAlloc;
using test::Seq;

CpuBackendOptions pool_opts() {
  CpuBackendOptions o;
  o.threads = 2;
  o.kv_bytes = 64ull << 20;
  return o;
}

// tiny: 4 heads / 2 KV heads (TP 1, 2). gqa4: 8 heads / 4 KV heads, tied embeddings (TP 4).
std::shared_ptr<const ModelWeights> gqa4() {
  MakeModelOptions o;
  o.heads = 8;
  o.kv_heads = 4;
  o.head_dim = 32;
  o.intermediate = 384;
  o.tie_embeddings = true;
  o.shards = true;
  return test::model("tp_gqa4", o);
}

// Runs one plan on every rank at once (one thread per rank, as the RankExecutors do) and
// returns rank 0's result; the other ranks must return the seq ids only.
StepResult step_all(std::vector<std::unique_ptr<Backend>>& ranks, const StepPlan& plan) {
  std::vector<std::future<StepResult>> f;
  for (std::size_t r = 1; r < ranks.size(); ++r)
    f.push_back(std::async(std::launch::async, [&, r] { return ranks[r]->step(plan); }));
  StepResult res0;
  std::exception_ptr err;
  try {
    res0 = ranks[0]->step(plan);
  } catch (...) {
    err = std::current_exception();
  }
  for (auto& x : f) {
    try {
      const auto o = x.get();
      EXPECT_EQ(o.seqs.size(), plan.seqs.size());
      for (std::size_t i = 0; i < o.seqs.size(); ++i) {
        EXPECT_EQ(o.seqs[i].seq_id, plan.seqs[i].seq_id);
        EXPECT_TRUE(o.seqs[i].logits.empty());
      }
    } catch (...) {
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  return res0;
}

// Teacher-forced run: prefill `prompt` in `chunk`-token chunks, then decode the tokens of
// `forced` (not the argmax, so every TP size sees the same inputs). Every row's logits.
std::vector<std::vector<float>> forced_run(std::vector<std::unique_ptr<Backend>>& ranks,
                                           const std::vector<LayerRule>& rules,
                                           const std::vector<std::int32_t>& prompt, int chunk,
                                           const std::vector<std::int32_t>& forced) {
  PageAlloc pages(ranks[0]->info().num_pages, /*shuffle_seed=*/5);
  Seq s(1, prompt, rules);
  const int V = ranks[0]->model().vocab_size;
  std::vector<std::vector<float>> rows;
  while (s.cached < s.prompt_len()) {
    auto st = s.prefill(std::min(chunk, s.prompt_len() - s.cached), pages);
    const auto r = step_all(ranks, test::plan_of({st}));
    s.after(st);
    const auto& l = r.seqs.at(0).logits;
    EXPECT_EQ(l.size(), st.tokens.size() * static_cast<std::size_t>(V));
    for (std::size_t i = 0; i < l.size() / V; ++i)
      rows.emplace_back(l.begin() + i * V, l.begin() + (i + 1) * V);
  }
  for (auto t : forced) {
    auto st = s.decode(t, pages);
    const auto r = step_all(ranks, test::plan_of({st}));
    s.after(st);
    rows.push_back(r.seqs.at(0).logits);
  }
  return rows;
}

// Largest |a - b| over a row relative to the row's largest |logit|, over all rows.
double max_rel_err(const std::vector<std::vector<float>>& a,
                   const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t r = 0; r < std::min(a.size(), b.size()); ++r) {
    EXPECT_EQ(a[r].size(), b[r].size());
    double mx = 0, err = 0;
    for (std::size_t j = 0; j < std::min(a[r].size(), b[r].size()); ++j) {
      mx = std::max(mx, std::abs(static_cast<double>(b[r][j])));
      err = std::max(err, std::abs(static_cast<double>(a[r][j]) - b[r][j]));
    }
    worst = std::max(worst, err / std::max(mx, 1e-30));
  }
  return worst;
}

std::vector<LayerRule> sparse_rules(const ModelConfig& c, Policy p) {
  return test::sparse_profile(p, 2, 48, 16, 4).resolve(c.num_hidden_layers);
}

// fp32 rounding of a different summation order (the all-reduce adds per-rank partial sums).
constexpr double kTol = 2e-5;

TEST(TpShard, ValidatesAndSplits) {
  auto c = test::tiny()->config();  // 4 heads, 2 KV heads, intermediate 512
  EXPECT_THROW(validate_tp(c, 3), ConfigError);
  EXPECT_THROW(validate_tp(c, 4), ConfigError);  // 2 KV heads
  EXPECT_THROW(make_tp_shard(c, 2, 2), ConfigError);
  EXPECT_NO_THROW(validate_tp(c, 2));
  c.intermediate_size = 511;
  EXPECT_THROW(validate_tp(c, 2), ConfigError);
  c.intermediate_size = 512;
  c.vocab_size = 1001;  // remainder: ceil(1001/2) = 501, the last slice has 500
  const auto s0 = make_tp_shard(c, 0, 2), s1 = make_tp_shard(c, 1, 2);
  EXPECT_EQ(s0.kv_begin, 0);
  EXPECT_EQ(s1.kv_begin, 1);
  EXPECT_EQ(s1.kv_heads, 1);
  EXPECT_EQ(s1.q_begin, 2);
  EXPECT_EQ(s1.q_heads, 2);
  EXPECT_EQ(s1.inter_begin, 256);
  EXPECT_EQ(s0.vocab_slice, 501);
  EXPECT_EQ(s0.vocab, 501);
  EXPECT_EQ(s1.vocab_begin, 501);
  EXPECT_EQ(s1.vocab, 500);
  const auto q = tp_slice(c, s1, "model.layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(q.split, TpSplit::kRows);
  EXPECT_EQ(q.begin, 2 * c.head_dim);
  const auto o = tp_slice(c, s1, "model.layers.3.self_attn.o_proj.weight");
  EXPECT_EQ(o.split, TpSplit::kCols);
  EXPECT_EQ(o.count, 2 * c.head_dim);
  EXPECT_EQ(tp_slice(c, s1, "model.layers.3.mlp.down_proj.weight").split, TpSplit::kCols);
  EXPECT_EQ(tp_slice(c, s1, "model.layers.3.mlp.up_proj.weight").split, TpSplit::kRows);
  EXPECT_EQ(tp_slice(c, s1, "model.embed_tokens.weight").split, TpSplit::kReplicated);
  EXPECT_EQ(tp_slice(c, s1, "model.layers.3.input_layernorm.weight").split, TpSplit::kReplicated);
}

// Every rank's byte ranges lie inside the tensor, the ranks' ranges are disjoint and
// together cover every byte once; the slices read equal the sub-matrices of the whole.
TEST(TpShard, SlicesReadOnlyTheirBytes) {
  auto w = gqa4();
  const auto& c = w->config();
  for (int n : {2, 4}) {
    for (const auto* t : {w->layer(1).q, w->layer(1).k, w->layer(1).o, w->layer(1).gate,
                          w->layer(1).down, &w->lm_head()}) {
      const auto whole = t->to_float();
      const std::int64_t rows = t->shape[0], cols = t->shape[1];
      std::vector<int> hits(t->bytes, 0);
      for (int r = 0; r < n; ++r) {
        const auto sh = make_tp_shard(c, r, n);
        const auto sl =
            t == &w->lm_head() ? tp_slice(c, sh, "lm_head.weight") : tp_slice(c, sh, t->name);
        ASSERT_NE(sl.split, TpSplit::kReplicated) << t->name;
        std::size_t bytes = 0;
        for (const auto& br : slice_ranges(*t, sl)) {
          ASSERT_LE(br.offset + br.bytes, t->bytes);
          for (std::size_t b = br.offset; b < br.offset + br.bytes; ++b) ++hits[b];
          bytes += br.bytes;
        }
        const auto shape = slice_shape(t->shape, sl);
        EXPECT_EQ(bytes, static_cast<std::size_t>(shape[0] * shape[1]) * dtype_bytes(t->dtype));
        const auto got = read_slice_f32(*t, sl);
        ASSERT_EQ(got.size(), static_cast<std::size_t>(shape[0] * shape[1]));
        for (std::int64_t i = 0; i < shape[0]; ++i)
          for (std::int64_t j = 0; j < shape[1]; ++j) {
            const std::int64_t wi = sl.split == TpSplit::kRows ? sl.begin + i : i;
            const std::int64_t wj = sl.split == TpSplit::kCols ? sl.begin + j : j;
            ASSERT_EQ(got[i * shape[1] + j], whole[wi * cols + wj]) << t->name;
          }
        std::vector<std::byte> raw(bytes);
        read_slice(*t, sl, raw.data());
      }
      (void)rows;
      for (std::size_t b = 0; b < hits.size(); ++b)
        ASSERT_EQ(hits[b], 1) << t->name << " byte " << b;
    }
  }
  TpSlice bad{TpSplit::kRows, 0, w->layer(0).q->shape[0] + 1};
  EXPECT_THROW(slice_ranges(*w->layer(0).q, bad), ModelError);
  EXPECT_THROW(slice_ranges(*w->layer(0).input_norm, TpSlice{TpSplit::kCols, 0, 1}), ModelError);
}

TEST(TpComm, AllReduceGatherAndAbort) {
  constexpr int n = 3;
  cpu::TpComm comm(n);
  std::vector<std::vector<float>> data(n);
  std::vector<float> gathered;
  std::vector<std::thread> th;
  for (int r = 0; r < n; ++r)
    th.emplace_back([&, r] {
      for (int it = 0; it < 50; ++it) {
        data[r].assign(7, static_cast<float>(r + 1 + it));
        comm.all_reduce_sum(r, data[r].data(), data[r].size());
        std::vector<float> mine(static_cast<std::size_t>(r + 1), static_cast<float>(r));
        comm.gather(r, mine.data(), mine.size(), r == 0 ? &gathered : nullptr);
        std::vector<float> everyone;
        comm.all_gather(r, mine.data(), mine.size(), everyone);
        EXPECT_EQ(everyone, (std::vector<float>{0, 1, 1, 2, 2, 2}));
      }
    });
  for (auto& t : th) t.join();
  for (int r = 0; r < n; ++r)
    for (float v : data[r]) EXPECT_EQ(v, 6.0f + 3 * 49);
  EXPECT_EQ(gathered, (std::vector<float>{0, 1, 1, 2, 2, 2}));

  // A rank that fails aborts the communicator: the waiting ranks throw, never hang.
  cpu::TpComm c2(2);
  auto f = std::async(std::launch::async, [&] {
    float x = 1;
    c2.all_reduce_sum(0, &x, 1);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  c2.abort("rank 1 failed: out of memory");
  try {
    f.get();
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 failed: out of memory"), std::string::npos);
  }
  float y = 0;
  EXPECT_THROW(c2.all_reduce_sum(1, &y, 1), InternalError);

  // A rank that never arrives: the collective times out with a message.
  cpu::TpComm c3(2, std::chrono::milliseconds(30));
  float z = 0;
  try {
    c3.gather(0, &z, 1, nullptr);
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("waited"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c3.aborted());
}

TEST(CpuTp, InfoAndShapes) {
  auto w = test::tiny();
  auto one = make_cpu_tp_backends(w, pool_opts(), 1);
  auto two = make_cpu_tp_backends(w, pool_opts(), 2);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(one[0]->info().name, "cpu");
  for (auto& b : two) {
    EXPECT_EQ(b->info().name, "cpu-tp2");
    EXPECT_EQ(b->info().tp_size, 2);
    EXPECT_EQ(b->info().layout.kv_heads, w->config().num_key_value_heads / 2);
    EXPECT_EQ(b->info().num_pages, one[0]->info().num_pages);  // kv_bytes is the total
    EXPECT_LT(b->info().weight_bytes, one[0]->info().weight_bytes);
  }
  EXPECT_THROW(make_cpu_tp_backends(w, pool_opts(), 3), ConfigError);
}

TEST(CpuTp, Tp2LogitsEqualTp1DenseAndSparse) {
  auto w = test::tiny();
  const auto& c = w->config();
  auto one = make_cpu_tp_backends(w, pool_opts(), 1);
  auto two = make_cpu_tp_backends(w, pool_opts(), 2);
  const auto prompt = test::tokens(100, c.vocab_size, 31);
  const auto forced = test::tokens(24, c.vocab_size, 32);
  const std::vector<LayerRule> full(static_cast<std::size_t>(c.num_hidden_layers));
  const auto ref = forced_run(one, full, prompt, 40, forced);
  const auto got = forced_run(two, full, prompt, 40, forced);
  ASSERT_EQ(ref.size(), 124u);
  const double e = max_rel_err(got, ref);
  EXPECT_LE(e, kTol) << "dense";
  std::printf("tp2 dense: max rel err %.3g over %zu rows\n", e, ref.size());
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored}) {
    const auto rules = sparse_rules(c, p);
    const auto sref = forced_run(one, rules, prompt, 40, forced);
    const auto sgot = forced_run(two, rules, prompt, 40, forced);
    // Sparsity is on: the decode rows differ from the dense run...
    EXPECT_GT(max_rel_err(sref, ref), 100 * kTol) << to_string(p);
    // ...and TP=2 follows TP=1 (same selections per KV head, made locally on each rank).
    const double es = max_rel_err(sgot, sref);
    EXPECT_LE(es, kTol) << to_string(p);
    std::printf("tp2 %s: max rel err %.3g\n", to_string(p), es);
  }
}

// cache.kv_dtype fp8 (docs/kv-fp8.md): every rank takes its KV heads' slice of the same scales
// (calibrated once at tp_size 1), so TP=2 stores the codes TP=1 stores except where the ranks'
// different fp32 summation order moves a K/V element across an e4m3 rounding boundary (one code
// step, 2^-3 relative): the logits follow TP=1 within e4m3's step, not bitwise.
TEST(CpuTp, Fp8KvTp2FollowsTp1) {
  auto w = test::tiny();
  const auto& c = w->config();
  CpuBackendOptions o = pool_opts();
  o.kv_dtype = KvDtype::kFp8;
  auto one = make_cpu_tp_backends(w, o, 1);
  auto two = make_cpu_tp_backends(w, o, 2);
  EXPECT_TRUE(two[0]->info().layout.fp8());
  EXPECT_EQ(two[0]->info().num_pages, one[0]->info().num_pages);
  const auto prompt = test::tokens(100, c.vocab_size, 31);
  const auto forced = test::tokens(24, c.vocab_size, 32);
  const std::vector<LayerRule> full(static_cast<std::size_t>(c.num_hidden_layers));
  const double e = max_rel_err(forced_run(two, full, prompt, 40, forced),
                               forced_run(one, full, prompt, 40, forced));
  std::printf("tp2 fp8 kv dense: max rel err %.3g\n", e);
  EXPECT_LE(e, 0.0625);
}

TEST(CpuTp, Tp4LogitsEqualTp1TiedShardedCheckpoint) {
  auto w = gqa4();
  const auto& c = w->config();
  auto one = make_cpu_tp_backends(w, pool_opts(), 1);
  auto two = make_cpu_tp_backends(w, pool_opts(), 2);
  auto four = make_cpu_tp_backends(w, pool_opts(), 4);
  const auto prompt = test::tokens(72, c.vocab_size, 41);
  const auto forced = test::tokens(12, c.vocab_size, 42);
  for (Policy p : {Policy::kFull, Policy::kSnapKv}) {
    const auto rules = p == Policy::kFull
                           ? std::vector<LayerRule>(static_cast<std::size_t>(c.num_hidden_layers))
                           : sparse_rules(c, p);
    const auto ref = forced_run(one, rules, prompt, 36, forced);
    const double e2 = max_rel_err(forced_run(two, rules, prompt, 36, forced), ref);
    const double e4 = max_rel_err(forced_run(four, rules, prompt, 36, forced), ref);
    EXPECT_LE(e2, kTol) << to_string(p);
    EXPECT_LE(e4, kTol) << to_string(p);
    std::printf("gqa4 %s: tp2 %.3g tp4 %.3g\n", to_string(p), e2, e4);
  }
}

// Sampling happens on rank 0 over the gathered logits: the same greedy tokens as TP=1, and a
// batch of two sequences (one sampled, one returning logits) comes back in plan order.
TEST(CpuTp, SamplesOnRankZero) {
  auto w = test::tiny();
  const auto& c = w->config();
  auto one = make_cpu_tp_backends(w, pool_opts(), 1);
  auto two = make_cpu_tp_backends(w, pool_opts(), 2);
  const std::vector<LayerRule> full(static_cast<std::size_t>(c.num_hidden_layers));
  SamplingParams params;
  params.temperature = 0;
  auto run = [&](std::vector<std::unique_ptr<Backend>>& be) {
    PageAlloc pages(be[0]->info().num_pages);
    Seq a(1, test::tokens(20, c.vocab_size, 51), full),
        b(2, test::tokens(9, c.vocab_size, 52), full);
    auto sa = a.prefill(20, pages, /*logits=*/false);
    sa.sample = true;
    sa.params = &params;
    sa.prompt = &a.prompt;
    sa.output = &a.output;
    auto sb = b.prefill(9, pages);
    return step_all(be, test::plan_of({sa, sb}));
  };
  const auto r1 = run(one), r2 = run(two);
  ASSERT_EQ(r2.seqs.size(), 2u);
  EXPECT_EQ(r2.seqs[0].seq_id, 1u);
  EXPECT_EQ(r2.seqs[0].token, r1.seqs[0].token);
  EXPECT_TRUE(r2.seqs[0].logits.empty());
  EXPECT_EQ(r2.seqs[1].seq_id, 2u);
  EXPECT_LE(max_rel_err({r2.seqs[1].logits}, {r1.seqs[1].logits}), kTol);
}

// A broken plan is refused by every rank before any collective (same checks, same plan):
// the step throws and the ranks stay usable.
TEST(CpuTp, BadPlanThrowsOnEveryRankWithoutHanging) {
  auto w = test::tiny();
  auto two = make_cpu_tp_backends(w, pool_opts(), 2);
  const std::vector<LayerRule> full(static_cast<std::size_t>(w->config().num_hidden_layers));
  PageAlloc pages(two[0]->info().num_pages);
  Seq s(1, test::tokens(10, w->config().vocab_size, 61), full);
  auto st = s.prefill(10, pages);
  auto bad = st;
  bad.layers[2].pages[0] = two[0]->info().num_pages;  // outside the pool
  EXPECT_THROW(step_all(two, test::plan_of({bad})), InternalError);
  const auto r = step_all(two, test::plan_of({st}));
  EXPECT_EQ(r.seqs[0].logits.size(), 10u * static_cast<std::size_t>(w->config().vocab_size));
}

// make_tp_group drives the ranks as one Backend (what `strata generate --force-ids --tp-size`
// uses): teacher forcing through it equals TP=1, and a failing plan fails the group.
TEST(CpuTp, GroupTeacherForcingEqualsTp1) {
  auto w = test::tiny();
  const auto& c = w->config();
  auto one = make_cpu_backend(w, pool_opts());
  auto group = make_tp_group(make_cpu_tp_backends(w, pool_opts(), 2));
  EXPECT_EQ(group->info().tp_size, 2);
  const auto ids = test::tokens(80, c.vocab_size, 71);
  for (bool sparse : {false, true}) {
    const SparsityProfile prof =
        sparse ? test::sparse_profile(Policy::kSnapKv, 2, 32, 8, 2) : SparsityProfile{};
    // Prefill 40, then 40 teacher-forced decodes (which see the sparse KV when sparse).
    const auto ref = teacher_forced_logits(*one, ids, prof, 40);
    const auto got = teacher_forced_logits(*group, ids, prof, 40);
    ASSERT_EQ(got.size(), ref.size());
    double mx = 0, err = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      mx = std::max(mx, std::abs(static_cast<double>(ref[i])));
      err = std::max(err, std::abs(static_cast<double>(got[i]) - ref[i]));
    }
    EXPECT_LE(err, kTol * mx) << (sparse ? "sparse" : "dense");
  }
  StepPlan bad;
  SeqStep st;
  st.seq_id = 1;
  st.tokens = {1};
  bad.seqs.push_back(st);  // no layer states
  EXPECT_THROW(group->step(bad), InternalError);
}

}  // namespace
}  // namespace strata
