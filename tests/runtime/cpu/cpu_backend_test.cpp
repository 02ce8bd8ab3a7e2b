#include "runtime/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <numbers>

#include "runtime/error.h"
#include "runtime/sampler.h"
#include "tests/runtime/cpu_test_util.h"

namespace strata {
namespace {
using test::PageAlloc;
using test::Seq;

// ---- an independent fp64 reference: contiguous KV, no pages, whole sequence at once ----

std::vector<double> f64(const TensorView& t) {
  const auto f = t.to_float();
  return {f.begin(), f.end()};
}

// HF Llama-3 rope scaling, written out again here.
std::vector<double> ref_inv_freq(const ModelConfig& c) {
  std::vector<double> inv;
  for (int i = 0; i < c.head_dim / 2; ++i) {
    double f = std::pow(c.rope_theta, -2.0 * i / c.head_dim);
    if (c.rope_scaling.type == "llama3") {
      const auto& s = c.rope_scaling;
      const double wl = 2 * std::numbers::pi / f;
      const double lo = s.original_max_position_embeddings / s.low_freq_factor;
      const double hi = s.original_max_position_embeddings / s.high_freq_factor;
      if (wl > lo) {
        f /= s.factor;
      } else if (wl >= hi) {
        const double sm = (s.original_max_position_embeddings / wl - s.low_freq_factor) /
                          (s.high_freq_factor - s.low_freq_factor);
        f = (1 - sm) * f / s.factor + sm * f;
      }
    }
    inv.push_back(f);
  }
  return inv;
}

// Logits [n][vocab] of every position of `toks`.
// `visible(layer, t, j)`: may row t attend to position j <= t (default: always).
using Mask = std::function<bool(int, int, int)>;
std::vector<double> reference_logits(const ModelWeights& w, const std::vector<std::int32_t>& toks,
                                     const Mask& visible = nullptr) {
  const auto& c = w.config();
  const int H = c.hidden_size, hd = c.head_dim, nh = c.num_attention_heads,
            nkv = c.num_key_value_heads, I = c.intermediate_size, n = static_cast<int>(toks.size());
  const auto inv = ref_inv_freq(c);
  auto linear = [](const std::vector<double>& W, const std::vector<double>& x, int out, int in) {
    std::vector<double> y(static_cast<std::size_t>(out));
    for (int o = 0; o < out; ++o)
      for (int i = 0; i < in; ++i) y[o] += W[static_cast<std::size_t>(o) * in + i] * x[i];
    return y;
  };
  auto norm = [&](const std::vector<double>& x, const std::vector<double>& g) {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1 / std::sqrt(ss / H + c.rms_norm_eps);
    std::vector<double> y(x.size());
    for (int i = 0; i < H; ++i) y[i] = x[i] * r * g[i];
    return y;
  };
  auto rope = [&](std::vector<double>& v, int heads, int pos) {
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < hd / 2; ++i) {
        double& a = v[h * hd + i];
        double& b = v[h * hd + i + hd / 2];
        const double cs = std::cos(pos * inv[i]), sn = std::sin(pos * inv[i]);
        const double na = a * cs - b * sn, nb = b * cs + a * sn;
        a = na, b = nb;
      }
  };
  const auto emb = f64(w.embed());
  std::vector<std::vector<double>> x(n);
  for (int t = 0; t < n; ++t)
    x[t].assign(emb.begin() + static_cast<std::ptrdiff_t>(toks[t]) * H,
                emb.begin() + static_cast<std::ptrdiff_t>(toks[t] + 1) * H);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const auto& L = w.layer(l);
    const auto gin = f64(*L.input_norm), gpost = f64(*L.post_norm), Wq = f64(*L.q), Wk = f64(*L.k),
               Wv = f64(*L.v), Wo = f64(*L.o), Wg = f64(*L.gate), Wu = f64(*L.up),
               Wd = f64(*L.down);
    std::vector<std::vector<double>> q(n), k(n), v(n);
    for (int t = 0; t < n; ++t) {
      const auto xn = norm(x[t], gin);
      q[t] = linear(Wq, xn, nh * hd, H);
      k[t] = linear(Wk, xn, nkv * hd, H);
      v[t] = linear(Wv, xn, nkv * hd, H);
      rope(q[t], nh, t);
      rope(k[t], nkv, t);
    }
    for (int t = 0; t < n; ++t) {
      std::vector<double> att(static_cast<std::size_t>(nh * hd));
      for (int h = 0; h < nh; ++h) {
        const int g = h / (nh / nkv);
        std::vector<double> s(t + 1);
        double m = -1e300;
        for (int j = 0; j <= t; ++j) {
          if (visible && !visible(l, t, j)) {
            s[j] = -1e300;
            continue;
          }
          for (int d = 0; d < hd; ++d) s[j] += q[t][h * hd + d] * k[j][g * hd + d];
          s[j] /= std::sqrt(static_cast<double>(hd));
          m = std::max(m, s[j]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = e == -1e300 ? 0.0 : std::exp(e - m));
        for (int j = 0; j <= t; ++j)
          for (int d = 0; d < hd; ++d) att[h * hd + d] += s[j] / sum * v[j][g * hd + d];
      }
      const auto o = linear(Wo, att, H, nh * hd);
      for (int i = 0; i < H; ++i) x[t][i] += o[i];
      const auto xn = norm(x[t], gpost);
      const auto ga = linear(Wg, xn, I, H), up = linear(Wu, xn, I, H);
      std::vector<double> a(static_cast<std::size_t>(I));
      for (int i = 0; i < I; ++i) a[i] = ga[i] / (1 + std::exp(-ga[i])) * up[i];
      const auto d = linear(Wd, a, H, I);
      for (int i = 0; i < H; ++i) x[t][i] += d[i];
    }
  }
  const auto fin = f64(w.final_norm()), head = f64(w.lm_head());
  std::vector<double> out;
  for (int t = 0; t < n; ++t) {
    const auto y = linear(head, norm(x[t], fin), c.vocab_size, H);
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

CpuBackendOptions small_pool(int threads = 2) {
  CpuBackendOptions o;
  o.threads = threads;
  o.kv_bytes = 64ull << 20;
  return o;
}

std::vector<LayerRule> full_rules(const ModelConfig& c) {
  return std::vector<LayerRule>(static_cast<std::size_t>(c.num_hidden_layers));
}

// Prefill `prompt` in the given chunk sizes (the last repeats); every row's logits.
std::vector<float> prefill_logits(Backend& be, PageAlloc& pages, Seq& s,
                                  const std::vector<int>& chunks) {
  std::vector<float> all;
  std::size_t ci = 0;
  while (s.cached < s.prompt_len()) {
    const int n = std::min(chunks[std::min(ci++, chunks.size() - 1)], s.prompt_len() - s.cached);
    auto step = s.prefill(n, pages);
    const auto r = be.step(test::plan_of({step}));
    s.after(step);
    all.insert(all.end(), r.seqs[0].logits.begin(), r.seqs[0].logits.end());
  }
  return all;
}

void expect_close_rows(const std::vector<float>& got, const std::vector<double>& want, int vocab,
                       double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t r = 0; r < got.size() / vocab; ++r) {
    double mx = 0, err = 0;
    for (int j = 0; j < vocab; ++j) {
      mx = std::max(mx, std::abs(want[r * vocab + j]));
      err = std::max(err, std::abs(got[r * vocab + j] - want[r * vocab + j]));
    }
    EXPECT_LE(err, rel * mx) << "row " << r;
  }
}

TEST(CpuBackend, InfoAndPool) {
  auto be = make_cpu_backend(test::tiny(), small_pool());
  const auto& c = be->model();
  EXPECT_EQ(be->info().name, "cpu");
  EXPECT_EQ(be->info().layout.elem_bytes, 4);
  EXPECT_EQ(be->info().layout.kv_heads, c.num_key_value_heads);
  EXPECT_EQ(be->info().num_pages, static_cast<int>((64ull << 20) / be->info().layout.page_bytes()));
  CpuBackendOptions none;
  none.kv_bytes = 100;
  EXPECT_THROW(make_cpu_backend(test::tiny(), none), ConfigError);
}

TEST(CpuBackend, ForwardMatchesFp64Reference) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  PageAlloc pages(be->info().num_pages);
  Seq s(1, test::tokens(40, w->config().vocab_size, 7), full_rules(w->config()));
  const auto got = prefill_logits(*be, pages, s, {40});
  expect_close_rows(got, reference_logits(*w, s.prompt), w->config().vocab_size, 1e-4);
}

TEST(CpuBackend, ForwardMatchesReferenceTiedGqa4PlainRope) {
  MakeModelOptions o;
  o.layers = 2;
  o.heads = 8;
  o.kv_heads = 2;
  o.head_dim = 32;
  o.tie_embeddings = true;
  o.llama3_rope = false;
  o.dtype = DType::kF32;
  auto w = test::model("tied_gqa4", o);
  auto be = make_cpu_backend(w, small_pool(1));
  PageAlloc pages(be->info().num_pages);
  Seq s(1, test::tokens(37, w->config().vocab_size, 3), full_rules(w->config()));
  const auto got = prefill_logits(*be, pages, s, {16, 5});
  expect_close_rows(got, reference_logits(*w, s.prompt), w->config().vocab_size, 1e-4);
}

TEST(CpuBackend, ChunkedPrefillEqualsUnchunked) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  PageAlloc pages(be->info().num_pages);
  const auto prompt = test::tokens(90, w->config().vocab_size, 11);
  Seq whole(1, prompt, full_rules(w->config()));
  const auto ref = prefill_logits(*be, pages, whole, {90});
  for (int chunk : {7, 16, 33}) {
    Seq s(2, prompt, full_rules(w->config()));
    EXPECT_EQ(prefill_logits(*be, pages, s, {chunk}), ref) << "chunk " << chunk;
  }
}

TEST(CpuBackend, ShuffledPagesEqualSequential) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  const auto prompt = test::tokens(70, w->config().vocab_size, 5);
  PageAlloc seq_pages(be->info().num_pages);
  PageAlloc shuffled(be->info().num_pages, 99);
  Seq a(1, prompt, full_rules(w->config())), b(2, prompt, full_rules(w->config()));
  EXPECT_EQ(prefill_logits(*be, seq_pages, a, {20}), prefill_logits(*be, shuffled, b, {20}));
  const int V = w->config().vocab_size;
  std::int32_t ta = 3, tb = 3;
  for (int i = 0; i < 20; ++i) {
    auto sa = a.decode(ta, seq_pages);
    auto sb = b.decode(tb, shuffled);
    const auto ra = be->step(test::plan_of({sa})), rb = be->step(test::plan_of({sb}));
    a.after(sa), b.after(sb);
    ASSERT_EQ(ra.seqs[0].logits, rb.seqs[0].logits) << "decode " << i;
    ta = tb = test::argmax(ra.seqs[0].logits.data(), V);
  }
}

TEST(CpuBackend, BatchedMixedEqualsAlone) {
  auto w = test::tiny();
  const int V = w->config().vocab_size;
  for (int threads : {1, 2, 3}) {
    auto batched = make_cpu_backend(w, small_pool(threads));
    auto alone = make_cpu_backend(w, small_pool(1));
    PageAlloc pb(batched->info().num_pages), pa(alone->info().num_pages);
    // Sequences at different stages: A decodes, B is mid-prefill, C starts its prompt.
    auto mk = [&](std::uint64_t id, int len) {
      return Seq(id, test::tokens(len, V, id * 31), full_rules(w->config()));
    };
    Seq A = mk(1, 30), B = mk(2, 50), C = mk(3, 21);
    Seq A2 = A, B2 = B, C2 = C;
    prefill_logits(*batched, pb, A, {30});
    prefill_logits(*alone, pa, A2, {30});
    auto b0 = B.prefill(17, pb);
    batched->step(test::plan_of({b0}));
    B.after(b0);
    auto b0a = B2.prefill(17, pa);
    alone->step(test::plan_of({b0a}));
    B2.after(b0a);
    for (int round = 0; round < 3; ++round) {
      std::vector<SeqStep> steps = {A.decode(5 + round, pb)};
      if (B.cached < B.prompt_len())
        steps.push_back(B.prefill(std::min(16, B.prompt_len() - B.cached), pb));
      else
        steps.push_back(B.decode(9, pb));
      steps.push_back(C.cached < C.prompt_len() ? C.prefill(C.prompt_len(), pb) : C.decode(4, pb));
      const auto rb = batched->step(test::plan_of(steps));
      ASSERT_EQ(rb.seqs.size(), 3u);
      A.after(steps[0]), B.after(steps[1]), C.after(steps[2]);
      Seq* alone_seqs[3] = {&A2, &B2, &C2};
      for (int i = 0; i < 3; ++i) {
        auto& s = *alone_seqs[i];
        auto st = steps[i].prefill ? s.prefill(static_cast<int>(steps[i].tokens.size()), pa)
                                   : s.decode(steps[i].tokens[0], pa);
        const auto ra = alone->step(test::plan_of({st}));
        s.after(st);
        EXPECT_EQ(rb.seqs[i].seq_id, steps[i].seq_id);
        ASSERT_EQ(rb.seqs[i].logits, ra.seqs[0].logits)
            << "threads " << threads << " round " << round << " seq " << i;
      }
    }
    EXPECT_EQ(batched->step(test::plan_of({A.decode(1, pb)})).stats.tokens, 1);
  }
}

TEST(CpuBackend, SampleGreedyUsesSampler) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  PageAlloc pages(be->info().num_pages);
  Seq s(1, test::tokens(12, w->config().vocab_size, 2), full_rules(w->config()));
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  auto st = s.prefill(12, pages);
  st.sample = true;
  st.params = &p;
  st.prompt = &s.prompt;
  st.output = &s.output;
  const auto r = be->step(test::plan_of({st}));
  const auto& row = r.seqs[0].logits;
  const int V = w->config().vocab_size;
  const auto want = test::argmax(row.data() + row.size() - V, V);
  EXPECT_EQ(r.seqs[0].token, want);
  ASSERT_EQ(r.seqs[0].top.size(), 2u);
  EXPECT_EQ(r.seqs[0].top[0].token, want);
  EXPECT_LT(r.seqs[0].logprob, 0.0f);
  // Without return_logits only the sampled row is computed; the token is the same.
  Seq s2(2, s.prompt, full_rules(w->config()));
  auto st2 = s2.prefill(12, pages, false);
  st2.sample = true;
  st2.params = &p;
  st2.prompt = &s2.prompt;
  st2.output = &s2.output;
  const auto r2 = be->step(test::plan_of({st2}));
  EXPECT_TRUE(r2.seqs[0].logits.empty());
  EXPECT_EQ(r2.seqs[0].token, want);
}

// Profile with every sparse capacity >= the whole sequence: identical to `full`.
std::vector<LayerRule> rules_for(const ModelConfig& c, Policy policy, int capacity, int window,
                                 int sinks) {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = 2;
  p.policy = policy;
  p.capacity = capacity;
  p.window = window;
  p.sinks = sinks;
  return p.resolve(c.num_hidden_layers);
}

std::vector<std::vector<float>> greedy_run(Backend& be, const std::vector<LayerRule>& rules,
                                           const std::vector<std::int32_t>& prompt, int gen,
                                           std::vector<int> chunks) {
  PageAlloc pages(be.info().num_pages);
  Seq s(1, prompt, rules);
  const int V = be.model().vocab_size;
  std::vector<std::vector<float>> rows;
  const auto pre = prefill_logits(be, pages, s, chunks);
  for (std::size_t r = 0; r < pre.size() / V; ++r)
    rows.emplace_back(pre.begin() + r * V, pre.begin() + (r + 1) * V);
  std::int32_t tok = test::argmax(rows.back().data(), V);
  for (int i = 0; i < gen; ++i) {
    auto st = s.decode(tok, pages);
    const auto r = be.step(test::plan_of({st}));
    s.after(st);
    rows.push_back(r.seqs[0].logits);
    tok = test::argmax(r.seqs[0].logits.data(), V);
  }
  return rows;
}

TEST(CpuBackend, SparsePoliciesWithRoomEqualFull) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  const auto& c = w->config();
  const auto prompt = test::tokens(24, c.vocab_size, 21);
  const auto full = greedy_run(*be, full_rules(c), prompt, 200, {10});
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored}) {
    const auto rules = rules_for(c, p, 240, 8, 2);
    ASSERT_TRUE(rules[3].sparse());
    const auto got = greedy_run(*be, rules, prompt, 200, {10});
    ASSERT_EQ(got.size(), full.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], full[i]) << to_string(p) << " row " << i;
  }
}

TEST(CpuBackend, LongPromptPrefillEqualsFullAndTempEqualsScratch) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  const auto& c = w->config();
  const auto prompt = test::tokens(100, c.vocab_size, 8);
  const auto full = greedy_run(*be, full_rules(c), prompt, 0, {100});
  const auto full_dec = greedy_run(*be, full_rules(c), prompt, 1, {100});
  for (Policy p : {Policy::kWindow, Policy::kSnapKv, Policy::kScored}) {
    const auto rules = rules_for(c, p, 48, 16, 4);
    // Prompt logits: the prefill attends over the whole prompt in temp pages / scratch.
    const auto scratch = greedy_run(*be, rules, prompt, 30, {100});
    const auto chunked =
        greedy_run(*be, rules, prompt, 30, {30, 70});  // last chunk holds the window
    for (std::size_t i = 0; i < full.size(); ++i) ASSERT_EQ(scratch[i], full[i]) << to_string(p);
    ASSERT_EQ(scratch, chunked) << to_string(p);
    // fp32 scoring (kernel arithmetic) runs the same path; the prompt rows are unaffected.
    CpuBackendOptions o32 = small_pool();
    o32.fp64_scores = false;
    auto be32 = make_cpu_backend(w, o32);
    const auto f32 = greedy_run(*be32, rules, prompt, 5, {30, 70});
    for (std::size_t i = 0; i < full.size(); ++i) ASSERT_EQ(f32[i], full[i]) << to_string(p);
    // After selection the sparse layers attend over fewer tokens: decode differs from full.
    EXPECT_NE(scratch[100], full_dec[100]) << to_string(p);
  }
}

TEST(CpuBackend, WindowRingMatchesStreamingLlmReference) {
  // Prompt fits (24 <= C = 28), then decode wraps the ring of C - sinks = 24 slots: every
  // row of a sparse layer must attend to the sinks plus its most recent 24 tokens.
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  const auto& c = w->config();
  const int C = 28, sinks = 4;
  const auto rules = rules_for(c, Policy::kWindow, C, 8, sinks);
  const auto prompt = test::tokens(24, c.vocab_size, 77);
  const auto rows = greedy_run(*be, rules, prompt, 40, {24});
  std::vector<std::int32_t> seq = prompt;
  for (std::size_t r = 23; r + 1 < rows.size(); ++r)
    seq.push_back(test::argmax(rows[r].data(), c.vocab_size));
  ASSERT_EQ(seq.size(), rows.size());
  const auto want = reference_logits(*w, seq, [&](int layer, int t, int j) {
    return !rules[static_cast<std::size_t>(layer)].sparse() || j < sinks || j > t - (C - sinks);
  });
  std::vector<float> got;
  for (const auto& r : rows) got.insert(got.end(), r.begin(), r.end());
  expect_close_rows(got, want, c.vocab_size, 1e-4);
  // The mask matters: the full-attention reference differs on the late rows.
  const auto full = reference_logits(*w, seq);
  double diff = 0;
  for (std::size_t j = full.size() - c.vocab_size; j < full.size(); ++j)
    diff = std::max(diff, std::abs(full[j] - want[j]));
  EXPECT_GT(diff, 1e-3);
}

// Decode `gen` tokens after a 100-token prompt (C = 48, scored); at decode step `at` the
// sparse layers get kShrink to `shrink_to` (0: never). Returns the decode logits.
std::vector<std::vector<float>> shrink_run(Backend& be, int gen, int at, int shrink_to) {
  const auto& c = be.model();
  PageAlloc pages(be.info().num_pages);
  Seq s(1, test::tokens(100, c.vocab_size, 8), rules_for(c, Policy::kScored, 48, 16, 4));
  const auto pre = prefill_logits(be, pages, s, {100});
  std::int32_t tok = test::argmax(pre.data() + pre.size() - c.vocab_size, c.vocab_size);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < gen; ++i) {
    auto st = s.decode(tok, pages);
    if (i == at && shrink_to)
      for (auto& ls : st.layers)
        if (ls.rule.sparse()) ls.action = LayerAction::kShrink, ls.shrink_to = shrink_to;
    const auto r = be.step(test::plan_of({st}));
    s.after(st);
    if (i == at && shrink_to)
      for (auto& ls : s.layers)
        if (ls.rule.sparse()) {  // the cache manager's view of a shrink (docs/sparsity-cpu.md)
          ls.valid = std::min(ls.valid, shrink_to);
          ls.ring_pos = 0;
          ls.rule.capacity = shrink_to;
        }
    rows.push_back(r.seqs[0].logits);
    tok = test::argmax(r.seqs[0].logits.data(), c.vocab_size);
  }
  return rows;
}

TEST(CpuBackend, LiveShrink) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  const int V = w->config().vocab_size;
  const auto base = shrink_run(*be, 30, 0, 0);
  // Shrinking to the capacity evicts nothing, only re-lays the ring oldest-first with
  // ring_pos 0: later steps keep the same tokens (attention sums in another slot order).
  const auto relaid = shrink_run(*be, 30, 7, 48);
  ASSERT_EQ(relaid.size(), base.size());
  for (std::size_t i = 0; i < base.size(); ++i) {
    double mx = 0, err = 0;
    for (int j = 0; j < V; ++j) {
      mx = std::max(mx, std::abs(static_cast<double>(base[i][j])));
      err = std::max(err, std::abs(static_cast<double>(relaid[i][j]) - base[i][j]));
    }
    EXPECT_LE(err, 1e-4 * mx) << "decode " << i;
  }
  // A real shrink keeps running on the smaller capacity and changes later logits.
  const auto shrunk = shrink_run(*be, 30, 7, 24);
  for (int i = 0; i <= 7; ++i) EXPECT_EQ(shrunk[i], base[i]);
  EXPECT_NE(shrunk[12], base[12]);
}

TEST(CpuBackend, PreconditionsThrow) {
  auto w = test::tiny();
  auto be = make_cpu_backend(w, small_pool());
  PageAlloc pages(be->info().num_pages);
  const auto& c = w->config();
  Seq s(1, test::tokens(20, c.vocab_size, 1), full_rules(c));
  auto good = s.prefill(20, pages);
  auto expect_internal = [&](SeqStep st, const char* what) {
    EXPECT_THROW(be->step(test::plan_of({st})), InternalError) << what;
  };
  {
    auto st = good;
    st.layers[2].pages[0] = be->info().num_pages;
    expect_internal(st, "page id out of range");
  }
  {
    auto st = good;
    st.layers[1].pages.pop_back();
    expect_internal(st, "table too short");
  }
  {
    auto st = good;
    st.layers[1].pages[0] = st.layers[0].pages[0];
    expect_internal(st, "page shared by two tables");
  }
  {
    auto st = good;
    st.layers.pop_back();
    expect_internal(st, "missing layer");
  }
  {
    // A token id comes from the request: InvalidRequest, as on CUDA (runtime/step_plan_check.h).
    auto st = good;
    st.tokens[0] = c.vocab_size;
    EXPECT_THROW(be->step(test::plan_of({st})), InvalidRequest) << "token outside vocabulary";
  }
  {
    auto st = good;
    st.layers[0].valid = 3;
    expect_internal(st, "valid disagrees with start");
  }
  {
    auto st = good;
    st.layers[0].action = LayerAction::kSelect;
    expect_internal(st, "action on a full layer");
  }
  {
    // Two sequences writing the same page.
    Seq t(2, s.prompt, full_rules(c));
    auto other = t.prefill(20, pages);
    other.layers[4].pages = good.layers[4].pages;
    EXPECT_THROW(be->step(test::plan_of({good, other})), InternalError);
  }
  // A good plan still runs afterwards.
  EXPECT_NO_THROW(be->step(test::plan_of({good})));
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// Benchmark mode, not a test (never timed in CI): run with
//   runtime_cpu_backend_test --gtest_also_run_disabled_tests --gtest_filter='*Bench*'
// Prints decode tokens/s of the tiny model for batch 1 and 8 at 1 and 2 threads.
TEST(CpuBackendBench, DISABLED_TinyDecodeTokensPerSecond) {
  auto w = test::tiny();
  const auto& c = w->config();
  const int V = c.vocab_size, gen = 256;
  for (int threads : {1, 2}) {
    for (int batch : {1, 8}) {
      auto be = make_cpu_backend(w, small_pool(threads));
      PageAlloc pages(be->info().num_pages);
      std::vector<Seq> seqs;
      std::vector<SeqStep> pre;
      for (int b = 0; b < batch; ++b) {
        seqs.emplace_back(b + 1, test::tokens(32, V, 100 + b), full_rules(c));
        pre.push_back(seqs.back().prefill(32, pages, false));
        pre.back().return_logits = true;
      }
      auto r = be->step(test::plan_of(pre));
      std::vector<std::int32_t> tok(static_cast<std::size_t>(batch));
      for (int b = 0; b < batch; ++b) {
        seqs[b].after(pre[b]);
        tok[b] = test::argmax(r.seqs[b].logits.data() + 31 * V, V);
      }
      const auto t0 = std::chrono::steady_clock::now();
      const std::clock_t c0 = std::clock();
      for (int i = 0; i < gen; ++i) {
        std::vector<SeqStep> steps;
        for (int b = 0; b < batch; ++b) steps.push_back(seqs[b].decode(tok[b], pages));
        r = be->step(test::plan_of(steps));
        for (int b = 0; b < batch; ++b) {
          seqs[b].after(steps[b]);
          tok[b] = test::argmax(r.seqs[b].logits.data(), V);
        }
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // CPU seconds of the whole process: on a shared machine wall time overstates cost.
      const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
      std::printf(
          "tiny decode: threads %d batch %d: %d steps (context 32..%d): wall %.3f s = %.0f "
          "tokens/s; %.3f CPU s = %.0f tokens per CPU second\n",
          threads, batch, gen, 32 + gen, s, gen * batch / s, cpu, gen * batch / cpu);
      EXPECT_GT(s, 0.0);
    }
  }
}

}  // namespace
}  // namespace strata
