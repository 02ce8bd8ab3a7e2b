// Whole-model checks of the CUDA backend, teacher-forced, against an fp64 CPU forward pass
// over the same bf16 weights (downloaded from the device): the tiny preset and a 4-layer
// Llama-3-8B-width model, with prefill, chunked prefill over paged prior context and
// decode steps; CUDA-graph replay against eager; sampling through the backend.
// Bound: relative L2 logit error <= 3e-2 per position, no NaN.
#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "cuda/cuda_backend.h"
#include "cuda/testing/backend_probe.h"
#include "runtime/config.h"
#include "runtime/error.h"
#include "runtime/sampler.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::gputest {
namespace {

using cuda::CudaBackend;
using cuda::CudaBackendProbe;

// fp64 Llama forward with a KV cache, fed one token at a time.
class RefModel {
 public:
  explicit RefModel(CudaBackend& be) : c_(be.model()) {
    auto get = [&](const std::string& n) { return CudaBackendProbe(be).weight_to_host(n); };
    embed_ = get("model.embed_tokens.weight");
    norm_ = get("model.norm.weight");
    lm_ = c_.tie_word_embeddings ? embed_ : get("lm_head.weight");
    for (int l = 0; l < c_.num_hidden_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      Layer L;
      L.in = get(p + "input_layernorm.weight");
      L.post = get(p + "post_attention_layernorm.weight");
      L.q = get(p + "self_attn.q_proj.weight");
      L.k = get(p + "self_attn.k_proj.weight");
      L.v = get(p + "self_attn.v_proj.weight");
      L.o = get(p + "self_attn.o_proj.weight");
      L.g = get(p + "mlp.gate_proj.weight");
      L.u = get(p + "mlp.up_proj.weight");
      L.d = get(p + "mlp.down_proj.weight");
      layers_.push_back(std::move(L));
    }
    inv_ = c_.rope_inv_freq();
    kc_.resize(layers_.size());
    vc_.resize(layers_.size());
  }

  // Appends `tok` at the next position; returns its logits.
  std::vector<double> push(int tok) {
    const int H = c_.hidden_size, hd = c_.head_dim, nh = c_.num_attention_heads,
              nkv = c_.num_key_value_heads;
    const int pos = static_cast<int>(kc_[0].size()) / c_.kv_dim();
    std::vector<double> x(static_cast<std::size_t>(H));
    for (int i = 0; i < H; ++i)
      x[static_cast<std::size_t>(i)] = embed_[static_cast<std::size_t>(tok) * H + i];
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      auto h = rmsnorm(x, L.in);
      auto q = matvec(L.q, h, c_.q_dim()), k = matvec(L.k, h, c_.kv_dim()),
           v = matvec(L.v, h, c_.kv_dim());
      rope(q, nh, pos);
      rope(k, nkv, pos);
      kc_[l].insert(kc_[l].end(), k.begin(), k.end());
      vc_[l].insert(vc_[l].end(), v.begin(), v.end());
      std::vector<double> att(static_cast<std::size_t>(c_.q_dim()));
      const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
      for (int hh = 0; hh < nh; ++hh) {
        const int g = hh / (nh / nkv);
        std::vector<double> s(static_cast<std::size_t>(pos + 1));
        double mx = -1e300;
        for (int j = 0; j <= pos; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e)
            d += q[static_cast<std::size_t>(hh * hd + e)] *
                 kc_[l][static_cast<std::size_t>(j) * c_.kv_dim() + g * hd + e];
          s[static_cast<std::size_t>(j)] = d * scale;
          mx = std::max(mx, d * scale);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int e = 0; e < hd; ++e) {
          double o = 0;
          for (int j = 0; j <= pos; ++j)
            o += s[static_cast<std::size_t>(j)] *
                 vc_[l][static_cast<std::size_t>(j) * c_.kv_dim() + g * hd + e];
          att[static_cast<std::size_t>(hh * hd + e)] = o / sum;
        }
      }
      auto o = matvec(L.o, att, H);
      for (int i = 0; i < H; ++i) x[static_cast<std::size_t>(i)] += o[static_cast<std::size_t>(i)];
      h = rmsnorm(x, L.post);
      auto gg = matvec(L.g, h, c_.intermediate_size), uu = matvec(L.u, h, c_.intermediate_size);
      for (std::size_t i = 0; i < gg.size(); ++i) gg[i] = gg[i] / (1 + std::exp(-gg[i])) * uu[i];
      auto d = matvec(L.d, gg, H);
      for (int i = 0; i < H; ++i) x[static_cast<std::size_t>(i)] += d[static_cast<std::size_t>(i)];
    }
    return matvec(lm_, rmsnorm(x, norm_), c_.vocab_size);
  }

 private:
  struct Layer {
    std::vector<float> in, post, q, k, v, o, g, u, d;
  };
  std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<float>& w) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + c_.rms_norm_eps);
    std::vector<double> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * w[i];
    return out;
  }
  static std::vector<double> matvec(const std::vector<float>& W, const std::vector<double>& x,
                                    int rows) {
    std::vector<double> y(static_cast<std::size_t>(rows));
    const std::size_t cols = x.size();
    parallel_for((rows + 255) / 256, [&](int blk) {
      for (int r = blk * 256; r < std::min(rows, blk * 256 + 256); ++r) {
        const float* w = W.data() + static_cast<std::size_t>(r) * cols;
        double s = 0;
        for (std::size_t c = 0; c < cols; ++c) s += w[c] * x[c];
        y[static_cast<std::size_t>(r)] = s;
      }
    });
    return y;
  }
  void rope(std::vector<double>& v, int heads, int pos) const {
    const int hd = c_.head_dim, half = hd / 2;
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < half; ++i) {
        const double a = v[static_cast<std::size_t>(h * hd + i)],
                     b = v[static_cast<std::size_t>(h * hd + i + half)];
        const double ang = pos * inv_[static_cast<std::size_t>(i)];
        v[static_cast<std::size_t>(h * hd + i)] = a * std::cos(ang) - b * std::sin(ang);
        v[static_cast<std::size_t>(h * hd + i + half)] = b * std::cos(ang) + a * std::sin(ang);
      }
  }
  ModelConfig c_;
  std::vector<float> embed_, norm_, lm_;
  std::vector<Layer> layers_;
  std::vector<double> inv_;
  std::vector<std::vector<double>> kc_, vc_;
};

Config make_config(const std::string& path, std::uint64_t kv_bytes) {
  Config c;
  c.model.path = path;
  c.model.seed = 7;
  c.model.max_model_len = 8192;
  c.cache.kv_bytes = kv_bytes;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 512;
  return c;
}

// One sequence's pages, per layer, from a simple bump allocator (distinct per layer).
struct SeqPages {
  std::vector<std::vector<int>> per_layer;
};
SeqPages alloc_pages(int layers, int slots, int& next_page) {
  SeqPages p;
  p.per_layer.resize(static_cast<std::size_t>(layers));
  for (auto& v : p.per_layer)
    for (int i = 0; i < pages_for_slots(slots); ++i) v.push_back(next_page++);
  return p;
}

SeqStep make_step(std::uint64_t id, const std::vector<int>& toks, int start, int prompt_len,
                  bool prefill, const SeqPages& pages, bool logits) {
  SeqStep s;
  s.seq_id = id;
  s.tokens = toks;
  s.start = start;
  s.prompt_len = prompt_len;
  s.prefill = prefill;
  s.return_logits = logits;
  for (const auto& pl : pages.per_layer) {
    LayerSlots ls;
    ls.valid = start;
    ls.pages = pl;
    s.layers.push_back(ls);
  }
  return s;
}

double rel_l2(const float* got, const std::vector<double>& ref, std::size_t* nan) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) ++*nan;
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// Two sequences: A = prefill na1 + na2 tokens in two chunks then 3 decodes; B = prefill nb
// tokens at once then 3 decodes, decodes batched together. Every position's logits are
// compared with the reference. fusion: -1 = STRATA_PREFILL_FUSION, 0/1 = the 16-byte kernels
// and the residual add in the O/down GEMM epilogue off/on (CudaBackendProbe). `all`: every
// logit returned, in step order. decode_fusion: -1 = STRATA_DECODE_FUSION, else the mode of the
// 2-row decode steps (CudaBackendProbe::set_decode_fusion).
void teacher_forced(const std::string& path, const std::string& tag, bool graphs, int na1 = 23,
                    int na2 = 17, int nb = 70, int fusion = -1, std::vector<float>* all = nullptr,
                    int decode_fusion = -1) {
  Config cfg = make_config(path, 256ull << 20);
  cfg.backend.cuda_graphs = graphs;
  CudaBackend be(cfg, 0);
  if (fusion >= 0) {
    CudaBackendProbe(be).set_prefill_fusion(fusion == 1);
    CudaBackendProbe(be).set_residual_epilogue(fusion == 1);
  }
  if (decode_fusion >= 0) CudaBackendProbe(be).set_decode_fusion(decode_fusion);
  const ModelConfig& mc = be.model();
  const int L = mc.num_hidden_layers, V = mc.vocab_size;
  std::mt19937_64 rng(5);
  auto rand_toks = [&](int n) {
    std::vector<int> t(static_cast<std::size_t>(n));
    for (auto& x : t) x = static_cast<int>(rng() % static_cast<unsigned>(V));
    return t;
  };
  const std::vector<int> a = rand_toks(na1 + na2 + 3), b = rand_toks(nb + 3);
  const int na = na1 + na2;
  RefModel ra(be), rb(be);
  int next = 0;
  const SeqPages pa = alloc_pages(L, na + 8, next), pb = alloc_pages(L, nb + 8, next);
  double worst = 0;
  std::size_t nan = 0;
  auto check = [&](const SeqResult& r, RefModel& ref, const std::vector<int>& toks, int from,
                   int n) {
    ASSERT_EQ(r.logits.size(), static_cast<std::size_t>(n) * V);
    if (all) all->insert(all->end(), r.logits.begin(), r.logits.end());
    for (int t = 0; t < n; ++t) {
      const std::vector<double> want = ref.push(toks[static_cast<std::size_t>(from + t)]);
      worst =
          std::max(worst, rel_l2(r.logits.data() + static_cast<std::size_t>(t) * V, want, &nan));
    }
  };
  auto slice = [](const std::vector<int>& v, int from, int n) {
    return std::vector<int>(v.begin() + from, v.begin() + from + n);
  };
  StepPlan p1;
  p1.step_id = 1;
  p1.seqs.push_back(make_step(1, slice(a, 0, na1), 0, na, true, pa, true));
  p1.seqs.push_back(make_step(2, slice(b, 0, nb), 0, nb, true, pb, true));
  StepResult r1 = be.step(p1);
  check(r1.seqs[0], ra, a, 0, na1);
  check(r1.seqs[1], rb, b, 0, nb);
  StepPlan p2;
  p2.step_id = 2;
  p2.seqs.push_back(make_step(1, slice(a, na1, na2), na1, na, true, pa, true));
  StepResult r2 = be.step(p2);
  check(r2.seqs[0], ra, a, na1, na2);
  for (int d = 0; d < 3; ++d) {
    StepPlan pd;
    pd.step_id = 3 + static_cast<std::uint64_t>(d);
    pd.seqs.push_back(make_step(2, slice(b, nb + d, 1), nb + d, nb, false, pb, true));
    pd.seqs.push_back(make_step(1, slice(a, na + d, 1), na + d, na, false, pa, true));
    StepResult rd = be.step(pd);
    check(rd.seqs[1], ra, a, na + d, 1);
    check(rd.seqs[0], rb, b, nb + d, 1);
  }
  EXPECT_EQ(nan, 0u);
  EXPECT_LE(worst, 3e-2) << tag;
  if (graphs) {
    EXPECT_GE(CudaBackendProbe(be).graphs_captured(), 1) << tag;
  }
  figure("model_rel_l2_" + tag + (graphs ? "_graphs" : "_eager"), worst);
}

TEST(GpuModel, TinyTeacherForcedEager) {
  REQUIRE_GPU();
  teacher_forced("random:tiny", "tiny", false);
}
TEST(GpuModel, TinyTeacherForcedGraphs) {
  REQUIRE_GPU();
  teacher_forced("random:tiny", "tiny", true);
}
// 150 + 300 logits rows in the first step: more than the 256-row lm_head chunk.
TEST(GpuModel, TinyTeacherForcedManyLogitRows) {
  REQUIRE_GPU();
  teacher_forced("random:tiny", "tiny_450rows", false, 150, 100, 300);
}
TEST(GpuModel, Llama8BWidth4LayersTeacherForced) {
  REQUIRE_GPU();
  teacher_forced("random:llama3-8b,layers=4", "llama8b_4layers", true, 9, 8, 17);
}

// Issue 19 item 2: the fused prefill path (16-byte kernels + the residual add in the O and down
// GEMMs' epilogue, resid += x . W^T in fp32, RMSNorm without the add) against the fp64
// reference (the bound above) and against the unfused path on the same plans (the same bound:
// the two differ by the bf16 rounding of the O/down outputs before the add, which the fused
// path no longer does, and the norms' fp32 summation order). Tiny (hidden 256: one warp per
// norm row) and the 8B width (hidden 4096, 14336: the shapes of the breakdown).
void fused_vs_unfused(const std::string& path, const std::string& tag, int na1, int na2, int nb) {
  std::vector<float> off, on;
  teacher_forced(path, tag + "_unfused", false, na1, na2, nb, 0, &off);
  teacher_forced(path, tag + "_fused", false, na1, na2, nb, 1, &on);
  ASSERT_EQ(off.size(), on.size());
  double num = 0, den = 0;
  std::size_t nan = 0;
  for (std::size_t i = 0; i < on.size(); ++i) {
    if (!std::isfinite(on[i])) ++nan;
    num += (static_cast<double>(on[i]) - off[i]) * (static_cast<double>(on[i]) - off[i]);
    den += static_cast<double>(off[i]) * off[i];
  }
  const double e = std::sqrt(num / std::max(den, 1e-30));
  EXPECT_EQ(nan, 0u) << tag;
  EXPECT_LE(e, 3e-2) << tag;
  EXPECT_GT(e, 0.0) << tag << ": the fused path changed nothing (was it taken?)";
  figure("model_fused_vs_unfused_rel_l2_" + tag, e);
}
TEST(GpuModel, TinyFusedPrefillMatchesUnfusedAndReference) {
  REQUIRE_GPU();
  fused_vs_unfused("random:tiny", "tiny", 23, 17, 70);
}
TEST(GpuModel, Llama8BWidthFusedPrefillMatchesUnfusedAndReference) {
  REQUIRE_GPU();
  fused_vs_unfused("random:llama3-8b,layers=4", "llama8b_4layers", 9, 8, 17);
}

// Issue 18 item 3: the decode fusion of 1-2 row steps (STRATA_DECODE_FUSION, the fused skinny
// kernels: RMSNorm + qkv, o + residual, RMSNorm + gate_up, SwiGLU + down + residual) against
// the fp64 reference (teacher_forced's bound, on its 2-row decode steps) and against the unfused
// path on the same plans. Both differ by the bf16 rounding of the normed rows and of the o/down
// outputs before the add, which the fused path does not make, and by fp32 summation order: the
// bound is the prefill fusion's. Modes 1 and 2 (PDL) give the same bits.
void decode_fused_vs_unfused(const std::string& path, const std::string& tag, bool graphs) {
  std::vector<float> off, on, on_pdl;
  teacher_forced(path, tag + "_dec_unfused", graphs, 9, 8, 17, -1, &off, 0);
  teacher_forced(path, tag + "_dec_fused", graphs, 9, 8, 17, -1, &on, 1);
  teacher_forced(path, tag + "_dec_fused_pdl", graphs, 9, 8, 17, -1, &on_pdl, 2);
  ASSERT_EQ(off.size(), on.size());
  EXPECT_EQ(on, on_pdl) << tag << ": programmatic dependent launch changed the result";
  double num = 0, den = 0;
  std::size_t nan = 0;
  for (std::size_t i = 0; i < on.size(); ++i) {
    if (!std::isfinite(on[i])) ++nan;
    num += (static_cast<double>(on[i]) - off[i]) * (static_cast<double>(on[i]) - off[i]);
    den += static_cast<double>(off[i]) * off[i];
  }
  const double e = std::sqrt(num / std::max(den, 1e-30));
  EXPECT_EQ(nan, 0u) << tag;
  EXPECT_LE(e, 3e-2) << tag;
  EXPECT_GT(e, 0.0) << tag << ": the decode fusion changed nothing (was it taken?)";
  figure("model_decode_fused_vs_unfused_rel_l2_" + tag + (graphs ? "_graphs" : "_eager"), e);
}
TEST(GpuModel, TinyDecodeFusionMatchesUnfusedAndReference) {
  REQUIRE_GPU();
  decode_fused_vs_unfused("random:tiny", "tiny", false);
  decode_fused_vs_unfused("random:tiny", "tiny", true);
}
TEST(GpuModel, Llama8BWidthDecodeFusionMatchesUnfusedAndReference) {
  REQUIRE_GPU();
  decode_fused_vs_unfused("random:llama3-8b,layers=4", "llama8b_4layers", false);
  decode_fused_vs_unfused("random:llama3-8b,layers=4", "llama8b_4layers", true);
}

// One sequence (1-row decode steps, the single-stream shape): a 20-token prompt, then 6 greedy
// steps feeding the argmax back. Returns every step's logits; `tokens` gets the greedy tokens.
std::vector<float> greedy_single(const std::string& path, int decode_fusion, bool graphs,
                                 std::vector<int>* tokens) {
  Config cfg = make_config(path, 256ull << 20);
  cfg.backend.cuda_graphs = graphs;
  CudaBackend be(cfg, 0);
  CudaBackendProbe(be).set_decode_fusion(decode_fusion);
  const int L = be.model().num_hidden_layers, V = be.model().vocab_size;
  int next = 0;
  const SeqPages pg = alloc_pages(L, 40, next);
  std::vector<int> prompt(20);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int>((i * 37 + 11) % static_cast<std::size_t>(V));
  std::vector<float> all;
  StepPlan p;
  p.step_id = 1;
  p.seqs.push_back(make_step(1, prompt, 0, 20, true, pg, true));
  StepResult r = be.step(p);
  auto last_argmax = [&](const SeqResult& sr) {
    const float* row = sr.logits.data() + sr.logits.size() - static_cast<std::size_t>(V);
    return static_cast<int>(std::max_element(row, row + V) - row);
  };
  int tok = last_argmax(r.seqs[0]);
  for (int d = 0; d < 6; ++d) {
    tokens->push_back(tok);
    StepPlan pd;
    pd.step_id = 2 + static_cast<std::uint64_t>(d);
    pd.seqs.push_back(make_step(1, {tok}, 20 + d, 20, false, pg, true));
    r = be.step(pd);
    all.insert(all.end(), r.seqs[0].logits.begin(), r.seqs[0].logits.end());
    tok = last_argmax(r.seqs[0]);
  }
  tokens->push_back(tok);
  if (graphs) {
    EXPECT_GE(CudaBackendProbe(be).graphs_captured(), 1);
  }
  return all;
}

// Greedy tokens equal fused vs unfused over 6 single-stream steps; the fused path is bitwise
// deterministic run to run, and its graph replay equals its eager run wherever the unfused
// path's does (the fusion adds no graph/eager difference of its own).
void decode_fusion_single_stream(const std::string& path, const std::string& tag) {
  std::vector<int> t_off, t_on, t_on2, t_on_g, t_off_g, t_pdl_g;
  const auto off = greedy_single(path, 0, false, &t_off);
  const auto on = greedy_single(path, 1, false, &t_on);
  const auto on2 = greedy_single(path, 1, false, &t_on2);
  const auto on_g = greedy_single(path, 1, true, &t_on_g);
  const auto off_g = greedy_single(path, 0, true, &t_off_g);
  const auto pdl_g = greedy_single(path, 2, true, &t_pdl_g);
  EXPECT_EQ(t_on, t_off) << tag << ": greedy tokens differ fused vs unfused";
  EXPECT_EQ(on, on2) << tag << ": the fused path is not deterministic run to run";
  EXPECT_EQ(on_g, pdl_g) << tag << ": programmatic dependent launch changed the result";
  if (off_g == off) {
    EXPECT_EQ(on_g, on) << tag << ": fused graph replay differs from fused eager";
  } else {
    std::vector<double> ref(on.begin(), on.end());
    std::size_t nan = 0;
    EXPECT_LE(rel_l2(on_g.data(), ref, &nan), 1e-3) << tag;
  }
  std::vector<double> ref(off.begin(), off.end());
  std::size_t nan = 0;
  const double e = rel_l2(on.data(), ref, &nan);
  EXPECT_EQ(nan, 0u);
  EXPECT_LE(e, 3e-2) << tag;
  figure("model_decode_fused_single_stream_rel_l2_" + tag, e);
}
TEST(GpuModel, TinyDecodeFusionSingleStream) {
  REQUIRE_GPU();
  decode_fusion_single_stream("random:tiny,vocab=528", "tiny");
}
TEST(GpuModel, Llama8BWidthDecodeFusionSingleStream) {
  REQUIRE_GPU();
  decode_fusion_single_stream("random:llama3-8b,layers=4", "llama8b_4layers");
}

// Graph replay and eager give the same logits for the same decode step (the step rewrites
// the same K/V, so it can run twice).
// random:tiny at its former CUDA vocabulary (528), where graph and eager are bitwise equal; at
// the shared parser's 684 they differ by 1.19e-3 rel L2 — the same figure at 0981c5b, before
// the split (docs/gpu-validation.md 2026-12-01): an open question, not a regression.
TEST(GpuModel, GraphReplayMatchesEager) {
  REQUIRE_GPU();
  CudaBackend be(make_config("random:tiny,vocab=528", 64ull << 20), 0);
  const int L = be.model().num_hidden_layers, V = be.model().vocab_size;
  int next = 0;
  std::vector<SeqPages> pages;
  StepPlan pre;
  for (int s = 0; s < 5; ++s) {
    pages.push_back(alloc_pages(L, 64, next));
    std::vector<int> toks(static_cast<std::size_t>(10 + 7 * s));
    for (std::size_t i = 0; i < toks.size(); ++i)
      toks[i] =
          static_cast<int>((i * 31 + static_cast<std::size_t>(s)) % static_cast<std::size_t>(V));
    pre.seqs.push_back(make_step(static_cast<std::uint64_t>(s), toks, 0,
                                 static_cast<int>(toks.size()), true, pages.back(), false));
  }
  be.step(pre);
  StepPlan dec;
  for (int s = 0; s < 5; ++s)
    dec.seqs.push_back(make_step(static_cast<std::uint64_t>(s), {s + 3}, 10 + 7 * s, 10 + 7 * s,
                                 false, pages[static_cast<std::size_t>(s)], true));
  CudaBackendProbe(be).set_cuda_graphs(false);
  const StepResult eager = be.step(dec);
  CudaBackendProbe(be).set_cuda_graphs(true);
  const StepResult g1 = be.step(dec);
  const StepResult g2 = be.step(dec);
  EXPECT_EQ(CudaBackendProbe(be).graphs_captured(), 1);
  double worst = 0;
  for (int s = 0; s < 5; ++s) {
    const auto& e = eager.seqs[static_cast<std::size_t>(s)].logits;
    std::vector<double> ref(e.begin(), e.end());
    std::size_t nan = 0;
    worst = std::max(worst, rel_l2(g1.seqs[static_cast<std::size_t>(s)].logits.data(), ref, &nan));
    EXPECT_EQ(nan, 0u);
    EXPECT_EQ(g1.seqs[static_cast<std::size_t>(s)].logits,
              g2.seqs[static_cast<std::size_t>(s)].logits);
  }
  EXPECT_LE(worst, 1e-3);
  figure("graph_vs_eager_rel_l2", worst);
}

// Sampling: greedy on the device equals argmax of the returned logits; a seeded
// temperature/top-k/top-p row equals the CPU sampler on the same logits.
TEST(GpuModel, SamplingMatchesCpuSampler) {
  REQUIRE_GPU();
  CudaBackend be(make_config("random:tiny", 64ull << 20), 0);
  const int L = be.model().num_hidden_layers, V = be.model().vocab_size;
  int next = 0;
  const SeqPages p0 = alloc_pages(L, 32, next), p1 = alloc_pages(L, 32, next);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams rnd;
  rnd.temperature = 0.8f, rnd.top_k = 50, rnd.top_p = 0.9f, rnd.seed = 99, rnd.logprobs = 3;
  const std::vector<int> prompt{1, 2, 3, 4, 5, 6, 7, 8, 9}, out;
  StepPlan p;
  p.seqs.push_back(make_step(1, prompt, 0, 9, true, p0, true));
  p.seqs.push_back(make_step(2, prompt, 0, 9, true, p1, true));
  for (auto* s : {&p.seqs[0], &p.seqs[1]}) s->sample = true, s->prompt = &prompt, s->output = &out;
  p.seqs[0].params = &greedy;
  p.seqs[1].params = &rnd;
  const StepResult r = be.step(p);
  const float* last0 = r.seqs[0].logits.data() + 8 * static_cast<std::size_t>(V);
  const int am = static_cast<int>(std::max_element(last0, last0 + V) - last0);
  EXPECT_EQ(r.seqs[0].token, am);
  std::vector<float> row(r.seqs[1].logits.begin() + 8 * static_cast<std::ptrdiff_t>(V),
                         r.seqs[1].logits.end());
  const SampleOutput so = sample_row(row, rnd, prompt, out, be.model().eos_token_ids);
  EXPECT_EQ(r.seqs[1].token, so.token);
  EXPECT_EQ(r.seqs[1].top.size(), 3u);
}

TEST(GpuModel, RejectsBadSparsePlansAndBadTokens) {
  REQUIRE_GPU();
  CudaBackend be(make_config("random:tiny", 64ull << 20), 0);
  const int L = be.model().num_hidden_layers;
  int next = 0;
  const SeqPages pg = alloc_pages(L, 32, next);
  StepPlan p;
  p.seqs.push_back(make_step(1, {1, 2, 3}, 0, 3, true, pg, false));
  // A sparse layer whose prompt exceeds its capacity needs temp pages (or the whole prompt
  // with kSelect): a 3-token chunk at start 0 of a 100-token prompt without them is rejected.
  p.seqs[0].layers[3].rule.policy = Policy::kScored;
  p.seqs[0].layers[3].rule.capacity = 64;
  p.seqs[0].layers[3].rule.sinks = 4;
  p.seqs[0].layers[3].rule.window = 8;
  p.seqs[0].layers[3].rule.ring = 8;
  p.seqs[0].prompt_len = 100;
  EXPECT_THROW(be.step(p), InternalError);
  p.seqs[0].prompt_len = 3;
  p.seqs[0].layers[3].rule = LayerRule{};
  p.seqs[0].tokens[1] = be.model().vocab_size;
  EXPECT_THROW(be.step(p), InvalidRequest);
  p.seqs[0].tokens[1] = 1;
  p.seqs[0].layers[0].pages[0] = be.info().num_pages;
  EXPECT_THROW(be.step(p), InternalError);
}

TEST(GpuModel, MemoryPlanHonoursByteCap) {
  REQUIRE_GPU();
  CudaBackend be(make_config("random:tiny", 10ull << 20), 0);
  // Accounting of cuda/backend/workspace.cpp plan_kv_pool: every page (handed out or prefill
  // scratch) carries its fp32 slot scores and int32 token positions (the census of kept
  // positions), and the scratch pages (one step's tokens laid out as pages, + one per sequence)
  // come out of the same byte cap.
  const std::uint64_t cap = 10ull << 20;
  const KvLayout& lay = be.info().layout;
  const std::size_t per_page =
      lay.page_bytes() + lay.score_elems() * (sizeof(float) + sizeof(std::int32_t));
  const std::size_t scratch = static_cast<std::size_t>(pages_for_slots(512) + 8);
  const std::size_t total_pages = static_cast<std::size_t>(be.info().num_pages) + scratch;
  EXPECT_LE(total_pages * per_page, cap);        // never over the cap
  EXPECT_GT((total_pages + 1) * per_page, cap);  // as many pages as fit
  EXPECT_EQ(CudaBackendProbe(be).kv_pool_bytes(), total_pages * per_page);
  EXPECT_EQ(be.info().num_pages, static_cast<int>(cap / per_page - scratch));
  EXPECT_GT(be.info().weight_bytes, 0u);
  EXPECT_GT(CudaBackendProbe(be).activation_bytes(), 0u);
  figure("tiny_weight_bytes", static_cast<double>(be.info().weight_bytes));
}

}  // namespace
}  // namespace strata::gputest
