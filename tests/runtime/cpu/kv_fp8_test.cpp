// The FP8 KV cache on the CPU backend (cache.kv_dtype fp8, issue 21, docs/kv-fp8.md): the scale
// rule, e4m3 rounding of K/V, attention over e4m3 K/V within the bound derived from e4m3's 2^-4
// relative step, calibration (deterministic, request independent), the pool's accounting, and
// the whole model with fp8 KV against fp32 KV (greedy agreement, logit error), full cache and
// each sparse policy (selection, ring, compaction over codes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "runtime/config.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/kv_pool.h"
#include "runtime/error.h"
#include "runtime/kv_scales.h"
#include "tests/runtime/cpu_test_util.h"
#include "tests/runtime/model/compressed_tensors_writer.h"

namespace strata {
namespace {
using test::PageAlloc;
using test::Seq;

bool power_of_two(float s) {
  int e = 0;
  return std::frexp(s, &e) == 0.5f;
}

TEST(KvFp8, ScaleFromAmaxIsThePowerOfTwoWithHeadroom) {
  EXPECT_EQ(kv_scale_from_amax(448.0f), 2.0f);  // 2 * 448 / 448 = 2 exactly
  EXPECT_EQ(kv_scale_from_amax(224.0f), 1.0f);
  EXPECT_EQ(kv_scale_from_amax(224.5f), 2.0f);
  EXPECT_EQ(kv_scale_from_amax(0.0f), 1.0f);
  EXPECT_EQ(kv_scale_from_amax(INFINITY), 1.0f);
  EXPECT_EQ(kv_scale_from_amax(NAN), 1.0f);
  std::mt19937 g(3);
  for (int i = 0; i < 2000; ++i) {
    const float amax = std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(g),
                                  std::uniform_int_distribution<int>(-20, 20)(g));
    const float s = kv_scale_from_amax(amax);
    ASSERT_TRUE(power_of_two(s)) << amax;
    // Headroom: 2 * amax fits in e4m3's range, and s is the smallest power of two that does.
    EXPECT_LE(kKvCalibrationHeadroom * amax / s, kE4m3Max) << amax;
    EXPECT_GT(kKvCalibrationHeadroom * amax / s, kE4m3Max / 2) << amax;
  }
}

// |dequant(quant(x)) - x| <= max(2^-4 |x|, 2^-10 s) for |x| <= 448 s: half a step of e4m3's 3
// mantissa bits among normals (spacing 2^-3 relative to the binade), half the subnormal spacing
// 2^-9 below 2^-6 (in units of s). Power-of-two scales make x / s and code * s exact.
TEST(KvFp8, QuantizationErrorIsHalfAStep) {
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float s : {0.001953125f, 0.25f, 1.0f, 16.0f}) {
    for (int i = 0; i < 20000; ++i) {
      const float x = n(g) * s * 40.0f;
      if (std::fabs(x) > kE4m3Max * s) continue;
      const float y = kv_dequantize(kv_quantize(x, s), s);
      ASSERT_LE(std::fabs(y - x), std::max(std::ldexp(std::fabs(x), -4), std::ldexp(s, -10)))
          << x << " scale " << s;
    }
    EXPECT_EQ(kv_dequantize(kv_quantize(1e30f, s), s), kE4m3Max * s);  // saturates, never inf
  }
}

// ---- attention over e4m3 K/V (cpu::attend, the oracle's kernel) ----------------------------

struct AttnCase {
  int head_dim, group, len;
};

// For one query row (per head) over slots [0, n): with δz_j = scale·q·(k'_j − k_j) the logit
// errors and Δ = max_j |δz_j|, softmax moves each probability by a factor in [e^-2Δ, e^2Δ], so
//   |o' − o| ≤ max_j |v'_j − v_j| + (e^{2Δ} − 1) · max_j |v_j|   (elementwise, per dimension),
//   |lse' − lse| ≤ Δ,
// with |k' − k| ≤ 2^-4 |k| elementwise a priori (Δ ≤ 2^-4 · scale · Σ_d |q_d k_jd|). The test
// takes δk, δv from the actual codes (tight) and allows 1e-5 of fp32 rounding on top.
TEST(KvFp8, AttentionWithinTheDerivedBound) {
  for (const AttnCase c : {AttnCase{16, 2, 37}, AttnCase{64, 4, 80}, AttnCase{128, 1, 50}}) {
    const int hd = c.head_dim, G = c.group, L = c.len;
    std::mt19937 g(static_cast<unsigned>(hd * 131 + L));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(static_cast<std::size_t>(L) * G * hd), k(static_cast<std::size_t>(L) * hd),
        v(k.size());
    for (auto& x : q) x = nd(g);
    for (auto& x : k) x = 3.0f * nd(g);
    for (auto& x : v) x = nd(g);
    float ka = 0, va = 0;
    for (std::size_t i = 0; i < k.size(); ++i) {
      ka = std::max(ka, std::fabs(k[i]));
      va = std::max(va, std::fabs(v[i]));
    }
    const cpu::KvCodec codec{true, kv_scale_from_amax(ka), kv_scale_from_amax(va)};
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    auto run = [&](int elem_bytes, std::vector<float>& out, std::vector<double>& lse) {
      cpu::KvPool pool(KvLayout{1, hd, elem_bytes}, pages_for_slots(L));
      LayerSlots ls{LayerRule{}};
      for (int p = 0; p < pages_for_slots(L); ++p) ls.pages.push_back(p);
      out.assign(static_cast<std::size_t>(L) * G * hd, NAN);
      lse.assign(static_cast<std::size_t>(L) * G, NAN);
      cpu::AttnArgs a;
      a.slots = &ls;
      a.n = a.prompt_len = L;
      a.head_dim = hd;
      a.group = G;
      a.scale = scale;
      a.q = q.data();
      a.k = k.data();
      a.v = v.data();
      a.q_stride = static_cast<std::size_t>(G) * hd;
      a.kv_stride = static_cast<std::size_t>(hd);
      a.out = out.data();
      a.out_stride = a.q_stride;
      a.lse = lse.data();
      a.lse_stride = static_cast<std::size_t>(G);
      if (elem_bytes == 1) a.codec = codec;
      cpu::attend(pool, 0, a);
    };
    std::vector<float> o32, o8;
    std::vector<double> l32, l8;
    run(4, o32, l32);
    run(1, o8, l8);
    std::vector<float> dk(k.size()), dv(v.size());
    for (std::size_t i = 0; i < k.size(); ++i) {
      dk[i] = kv_dequantize(kv_quantize(k[i], codec.k_scale), codec.k_scale) - k[i];
      dv[i] = kv_dequantize(kv_quantize(v[i], codec.v_scale), codec.v_scale) - v[i];
      ASSERT_LE(std::fabs(dk[i]), std::ldexp(std::fabs(k[i]), -4) + std::ldexp(codec.k_scale, -10));
    }
    double worst = 0;  // largest share of the bound used
    for (int t = 0; t < L; ++t)
      for (int h = 0; h < G; ++h) {
        const float* qh = &q[(static_cast<std::size_t>(t) * G + h) * hd];
        double delta = 0;
        for (int j = 0; j <= t; ++j) {
          double z = 0;
          for (int d = 0; d < hd; ++d) z += static_cast<double>(qh[d]) * dk[j * hd + d];
          delta = std::max(delta, std::fabs(z) * scale);
        }
        const std::size_t r = static_cast<std::size_t>(t) * G + h;
        EXPECT_LE(std::fabs(l8[r] - l32[r]), delta + 1e-5) << "row " << t << " head " << h;
        for (int d = 0; d < hd; ++d) {
          double vmax = 0, dvmax = 0;
          for (int j = 0; j <= t; ++j) {
            vmax = std::max(vmax, static_cast<double>(std::fabs(v[j * hd + d])));
            dvmax = std::max(dvmax, static_cast<double>(std::fabs(dv[j * hd + d])));
          }
          const double bound = dvmax + std::expm1(2 * delta) * vmax + 1e-5 * (vmax + 1);
          const double err = std::fabs(o8[r * hd + d] - o32[r * hd + d]);
          ASSERT_LE(err, bound) << "row " << t << " head " << h << " dim " << d;
          worst = std::max(worst, err / bound);
        }
      }
    std::printf("[ figure ] kv_fp8_attention_bound_share_hd%d_g%d_len%d %.3f\n", hd, G, L, worst);
  }
}

// ---- the backend -----------------------------------------------------------------------------

CpuBackendOptions opts(KvDtype dt, std::uint64_t kv_bytes = 16ull << 20) {
  CpuBackendOptions o;
  o.threads = 2;
  o.kv_bytes = kv_bytes;
  o.kv_dtype = dt;
  return o;
}

TEST(KvFp8, ConfigKeyAndSet) {
  EXPECT_EQ(Config{}.cache.kv_dtype, KvDtype::kBf16);
  Config c = parse_config_yaml("cache:\n  kv_dtype: fp8\n", "test");
  EXPECT_EQ(c.cache.kv_dtype, KvDtype::kFp8);
  EXPECT_EQ(cpu_backend_options(c).kv_dtype, KvDtype::kFp8);
  c.set("cache.kv_dtype", "bf16");
  EXPECT_EQ(c.cache.kv_dtype, KvDtype::kBf16);
  try {
    c.set("cache.kv_dtype", "int8");
    FAIL() << "int8 accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "cache.kv_dtype");
    EXPECT_EQ(c.cache.kv_dtype, KvDtype::kBf16);  // a bad value changes nothing
  }
}

// An fp8 page is a quarter of the CPU's fp32 page (and half of CUDA's bf16 page): the same
// cache.cpu_kv_bytes holds 4x the pages.
TEST(KvFp8, PoolHoldsMorePagesForTheSameBytes) {
  const auto w = test::tiny();
  const auto& c = w->config();
  auto b32 = make_cpu_backend(w, opts(KvDtype::kBf16));
  auto b8 = make_cpu_backend(w, opts(KvDtype::kFp8));
  EXPECT_EQ(b8->info().layout.elem_bytes, 1);
  EXPECT_TRUE(b8->info().layout.fp8());
  EXPECT_EQ(b8->info().layout.page_bytes(),
            static_cast<std::size_t>(2) * c.num_key_value_heads * kBlockSize * c.head_dim);
  EXPECT_EQ(b8->info().layout.page_bytes() * 4, b32->info().layout.page_bytes());
  EXPECT_EQ(b8->info().num_pages, 4 * b32->info().num_pages);
  EXPECT_NE(b8->info().name, b32->info().name);  // part of the prefix cache's model identity
}

TEST(KvFp8, CalibrationIsDeterministicPowerOfTwoAndShaped) {
  const auto w = test::tiny();
  const auto& c = w->config();
  const KvScales a = cpu_kv_scales(w, opts(KvDtype::kFp8));
  const KvScales b = cpu_kv_scales(w, opts(KvDtype::kFp8));
  EXPECT_EQ(a.source, "calibrated");
  EXPECT_EQ(a.layers, c.num_hidden_layers);
  EXPECT_EQ(a.kv_heads, c.num_key_value_heads);
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.v, b.v);
  for (std::size_t i = 0; i < a.k.size(); ++i) {
    EXPECT_TRUE(power_of_two(a.k[i]) && power_of_two(a.v[i])) << i;
  }
  // The scales are the rule applied to the amax the fp32 path records over the prompts.
  KvAmax amax(c.num_hidden_layers, c.num_key_value_heads);
  CpuBackendOptions o = opts(KvDtype::kBf16);
  o.kv_amax = &amax;
  auto be = make_cpu_backend(w, o);
  const KvScales again = calibrate_kv_scales(*be, amax, c.max_position_embeddings);
  EXPECT_EQ(again.k, a.k);
  EXPECT_EQ(again.v, a.v);
  for (std::size_t i = 0; i < amax.k.size(); ++i) EXPECT_GT(amax.k[i], 0.0f);
  // Given scales are used as they are; misshaped ones are refused.
  CpuBackendOptions given = opts(KvDtype::kFp8);
  given.kv_scales = a;
  given.kv_scales.k[0] *= 2;
  EXPECT_EQ(cpu_kv_scales(w, given).k[0], 2 * a.k[0]);
  given.kv_scales.k.pop_back();
  EXPECT_THROW(make_cpu_backend(w, given), ConfigError);
  given.kv_scales = a;
  given.kv_scales.v[1] = 0;
  EXPECT_THROW(make_cpu_backend(w, given), ConfigError);
}

// A compressed-tensors checkpoint with kv_cache_scheme: its per-layer k_scale / v_scale are the
// scales ([1]: every head; [kv_heads]: per head), used as written; a missing tensor or another
// scheme is a ModelError naming it.
std::shared_ptr<const ModelWeights> kv_checkpoint(const std::string& name,
                                                  const std::string& strategy, bool per_head,
                                                  bool drop_one = false) {
  const auto src = test::tiny();
  const auto& c = src->config();
  test::CtOptions o;
  o.edit_config = [strategy](boost::json::object& q) {
    q["kv_cache_scheme"] = {{"num_bits", 8},       {"type", "float"},      {"symmetric", true},
                            {"dynamic", false},    {"strategy", strategy}, {"group_size", nullptr},
                            {"observer", "minmax"}};
  };
  for (int l = 0; l < c.num_hidden_layers; ++l)
    for (const char* part : {"k_scale", "v_scale"}) {
      const std::string t = "model.layers." + std::to_string(l) + ".self_attn." + part;
      if (drop_one && l == 1 && part[0] == 'v') continue;
      std::vector<float> vals;
      for (int h = 0; h < (per_head ? c.num_key_value_heads : 1); ++h)
        vals.push_back(0.01f * static_cast<float>(1 + l) + (part[0] == 'v' ? 0.5f : 0.0f) +
                       0.001f * static_cast<float>(h));
      o.extra[t] = {{static_cast<std::int64_t>(vals.size())}, vals};
    }
  const std::string d =
      ::testing::TempDir() + "/strata_kvfp8_" + name + "." + std::to_string(::getpid());
  test::write_ct_checkpoint(src->dir(), d, o);
  return ModelWeights::load(d);
}

TEST(KvFp8, CheckpointScalesAreUsedAsWritten) {
  for (const bool per_head : {false, true}) {
    const auto w =
        kv_checkpoint(per_head ? "head" : "tensor", per_head ? "attn_head" : "tensor", per_head);
    const auto& c = w->config();
    const KvScales s = cpu_kv_scales(w, opts(KvDtype::kFp8));
    EXPECT_EQ(s.source, "checkpoint");
    for (int l = 0; l < c.num_hidden_layers; ++l)
      for (int h = 0; h < c.num_key_value_heads; ++h) {
        const float hh = per_head ? 0.001f * static_cast<float>(h) : 0.0f;
        EXPECT_EQ(s.k_at(l, h), 0.01f * static_cast<float>(1 + l) + hh);
        EXPECT_EQ(s.v_at(l, h), 0.01f * static_cast<float>(1 + l) + 0.5f + hh);
      }
    // The backend runs with them (the checkpoint's FP8 weights, e4m3 KV).
    auto be = make_cpu_backend(w, opts(KvDtype::kFp8));
    EXPECT_TRUE(be->info().layout.fp8());
    PageAlloc pages(be->info().num_pages);
    Seq seq(1, test::tokens(20, c.vocab_size, 4), std::vector<LayerRule>(c.num_hidden_layers));
    const auto st = seq.prefill(20, pages);
    const auto r = be->step(test::plan_of({st}));
    for (float x : r.seqs[0].logits) ASSERT_TRUE(std::isfinite(x));
  }
  const auto missing = kv_checkpoint("missing", "tensor", false, true);
  try {
    cpu_kv_scales(missing, opts(KvDtype::kFp8));
    FAIL() << "missing v_scale accepted";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.v_scale"), std::string::npos)
        << e.what();
  }
  const auto channel = kv_checkpoint("channel", "channel", false);
  EXPECT_THROW(cpu_kv_scales(channel, opts(KvDtype::kFp8)), ModelError);
  // A bf16/fp32 cache ignores the checkpoint's KV scales.
  EXPECT_FALSE(make_cpu_backend(channel, opts(KvDtype::kBf16))->info().layout.fp8());
}

// Teacher-forced: the same tokens through an fp32-KV and an fp8-KV backend (prompt in chunks,
// then decode steps), every position's logits. Returns (argmax agreement, worst per-row
// relative L2 of the logits).
struct Compare {
  double agreement = 0, worst_rel_l2 = 0, mean_rel_l2 = 0;
  int positions = 0;
};

Compare compare(const std::shared_ptr<const ModelWeights>& w, const std::vector<LayerRule>& rules,
                int prompt_len, int gen, std::uint64_t seed) {
  const auto& c = w->config();
  auto b32 = make_cpu_backend(w, opts(KvDtype::kBf16));
  auto b8 = make_cpu_backend(w, opts(KvDtype::kFp8));
  PageAlloc p32(b32->info().num_pages, 7), p8(b8->info().num_pages, 9);
  const auto prompt = test::tokens(prompt_len, c.vocab_size, seed);
  Seq s32(1, prompt, rules), s8(1, prompt, rules);
  std::vector<float> l32, l8;
  while (s32.cached < s32.prompt_len()) {
    const int n = std::min(24, s32.prompt_len() - s32.cached);
    const auto a = s32.prefill(n, p32), b = s8.prefill(n, p8);
    const auto ra = b32->step(test::plan_of({a})), rb = b8->step(test::plan_of({b}));
    s32.after(a);
    s8.after(b);
    l32.insert(l32.end(), ra.seqs[0].logits.begin(), ra.seqs[0].logits.end());
    l8.insert(l8.end(), rb.seqs[0].logits.begin(), rb.seqs[0].logits.end());
  }
  for (int i = 0; i < gen; ++i) {
    // The fp32 run's greedy token, fed to both.
    const auto tok = test::argmax(&l32[l32.size() - c.vocab_size], c.vocab_size);
    const auto a = s32.decode(tok, p32), b = s8.decode(tok, p8);
    const auto ra = b32->step(test::plan_of({a})), rb = b8->step(test::plan_of({b}));
    s32.after(a);
    s8.after(b);
    l32.insert(l32.end(), ra.seqs[0].logits.begin(), ra.seqs[0].logits.end());
    l8.insert(l8.end(), rb.seqs[0].logits.begin(), rb.seqs[0].logits.end());
  }
  Compare r;
  const std::size_t V = static_cast<std::size_t>(c.vocab_size);
  r.positions = static_cast<int>(l32.size() / V);
  int agree = 0;
  for (int t = 0; t < r.positions; ++t) {
    const float* a = &l32[t * V];
    const float* b = &l8[t * V];
    agree += test::argmax(a, c.vocab_size) == test::argmax(b, c.vocab_size);
    double num = 0, den = 0;
    for (std::size_t j = 0; j < V; ++j) {
      num += (static_cast<double>(a[j]) - b[j]) * (static_cast<double>(a[j]) - b[j]);
      den += static_cast<double>(a[j]) * a[j];
    }
    const double rel = std::sqrt(num / den);
    r.worst_rel_l2 = std::max(r.worst_rel_l2, rel);
    r.mean_rel_l2 += rel / r.positions;
  }
  r.agreement = static_cast<double>(agree) / r.positions;
  return r;
}

std::vector<LayerRule> rules_of(const ModelConfig& c, Policy policy) {
  std::vector<LayerRule> rules(static_cast<std::size_t>(c.num_hidden_layers));
  if (policy == Policy::kFull) return rules;
  for (std::size_t l = 1; l < rules.size(); ++l) {
    auto& r = rules[l];
    r.policy = policy;
    r.capacity = 32;
    r.sinks = 2;
    r.window = 8;
    r.ring = policy == Policy::kScored ? 8 : policy == Policy::kWindow ? 30 : 0;
  }
  return rules;
}

// Whole model: the attention bound above is per layer (and rigorous); through the layers each
// attention output's error (at most ~2^-4 of V's range, far less on average since independent
// elements' errors average out) feeds the next layer, which no closed form bounds usefully. The
// tolerances are therefore stated against e4m3's step with margin over what this random model
// shows (printed):
// - full cache: every position's logits within 2^-4 relative L2 of the fp32-KV run (no worse than
//   rounding every logit to e4m3), greedy agreement >= 90 % (random weights have near ties);
// - sparse policies: the selection (top-k of the scores), the scored ring's replacements and the
//   shrink are discrete, so one flipped choice moves a row by more than any rounding bound; what
//   is required is the mean over positions within 2^-3 and agreement >= 85 %.
// The evaluation model's >= 97 % agreement and <= 1 % perplexity change are GPU-run criteria.
class KvFp8Model : public ::testing::TestWithParam<Policy> {};

TEST_P(KvFp8Model, Fp8KvCloseToFp32Kv) {
  const auto w = test::tiny();
  const auto r = compare(w, rules_of(w->config(), GetParam()), 90, 40, 21);
  std::printf("[ figure ] kv_fp8_vs_fp32_%s agreement %.4f over %d, rel L2 mean %.2e worst %.2e\n",
              to_string(GetParam()), r.agreement, r.positions, r.mean_rel_l2, r.worst_rel_l2);
  EXPECT_GT(r.worst_rel_l2, 0.0);  // the cache really is e4m3
  if (GetParam() == Policy::kFull) {
    EXPECT_GE(r.agreement, 0.90);
    EXPECT_LE(r.worst_rel_l2, 0.0625);
  } else {
    EXPECT_GE(r.agreement, 0.85);
    EXPECT_LE(r.mean_rel_l2, 0.125);
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, KvFp8Model,
                         ::testing::Values(Policy::kFull, Policy::kWindow, Policy::kSnapKv,
                                           Policy::kScored),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// A cached prefix means the same bytes for every request: the codes of a prompt's K/V do not
// depend on how the prompt was chunked, on other sequences in the batch, or on the backend's
// instance (the scales are fixed at construction), so chunked and whole prefills of the same
// tokens give the same logits bit for bit (the CPU kernels are chunk invariant).
TEST(KvFp8, SameBitsForEveryChunkingAndBackendInstance) {
  const auto w = test::tiny();
  const auto& c = w->config();
  const auto rules = rules_of(c, Policy::kFull);
  const auto prompt = test::tokens(70, c.vocab_size, 33);
  auto run = [&](const std::vector<int>& chunks) {
    auto be = make_cpu_backend(w, opts(KvDtype::kFp8));
    PageAlloc pages(be->info().num_pages, 5);
    Seq s(1, prompt, rules);
    std::vector<float> last;
    std::size_t ci = 0;
    while (s.cached < s.prompt_len()) {
      const int n = std::min(chunks[std::min(ci++, chunks.size() - 1)], s.prompt_len() - s.cached);
      const auto st = s.prefill(n, pages);
      const auto r = be->step(test::plan_of({st}));
      s.after(st);
      last.assign(r.seqs[0].logits.end() - c.vocab_size, r.seqs[0].logits.end());
    }
    return last;
  };
  const auto whole = run({70});
  for (const auto& ch : {std::vector<int>{16}, std::vector<int>{5, 32}, std::vector<int>{48}}) {
    const auto got = run(ch);
    ASSERT_EQ(got.size(), whole.size());
    EXPECT_EQ(std::memcmp(got.data(), whole.data(), got.size() * sizeof(float)), 0);
  }
}

}  // namespace
}  // namespace strata
