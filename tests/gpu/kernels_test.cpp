// Element-wise kernels against fp64 CPU references on bf16-rounded random inputs.
// Bound: relative error <= 1e-2 where |ref| > 1e-3, no NaN (outputs poisoned first).
#include "cuda/kernels.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>

#include "cuda/gemm.h"
#include "runtime/kv_layout.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_config.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::gputest {
namespace {

using namespace strata::cuda;

// vec: the 16-byte kernel (issue 19 item 2). H = 264 and 8200 leave a partial warp of 8-element
// chunks (8200: two chunks per thread); H = 300 is not a multiple of 8 (the scalar kernel).
TEST(GpuKernels, RmsNormFusedResidual) {
  REQUIRE_GPU();
  std::mt19937_64 rng(11);
  for (bool vec : {false, true}) {
    for (int T : {1, 17, 64}) {
      for (int H : {256, 4096, 264, 300, 8200}) {
        for (bool with_delta : {false, true}) {
          std::normal_distribution<double> nd(0, 1);
          std::vector<float> resid(static_cast<std::size_t>(T) * H);
          for (auto& x : resid) x = static_cast<float>(nd(rng));
          const Bf16Data delta = random_bf16(resid.size(), 0.5, rng);
          const Bf16Data w = random_bf16(H, 0.2, rng);
          auto d_resid = to_device(resid);
          auto d_delta = to_device_bf16(delta.bits);
          auto d_w = to_device_bf16(w.bits);
          DeviceArray<bf16> d_out(resid.size());
          poison(d_out);
          launch_rmsnorm({d_resid.get(),
                          with_delta ? d_delta.get() : nullptr,
                          d_w.get(),
                          d_out.get(),
                          nullptr,
                          T,
                          H,
                          1e-5f,
                          {},
                          0.0f,
                          vec},
                         nullptr);
          CUDA_CHECK(cudaDeviceSynchronize());
          std::vector<double> ref(resid.size()), ref_resid(resid.size());
          for (int t = 0; t < T; ++t) {
            double ss = 0;
            for (int i = 0; i < H; ++i) {
              const std::size_t k = static_cast<std::size_t>(t) * H + i;
              ref_resid[k] = resid[k] + (with_delta ? delta.val[k] : 0.0);
              ss += ref_resid[k] * ref_resid[k];
            }
            const double inv = 1.0 / std::sqrt(ss / H + 1e-5);
            for (int i = 0; i < H; ++i) {
              const std::size_t k = static_cast<std::size_t>(t) * H + i;
              ref[k] = ref_resid[k] * inv * w.val[static_cast<std::size_t>(i)];
            }
          }
          const ErrStats e = compare(to_host_bf16(d_out.get(), ref.size()), ref);
          const auto got_resid = to_host(d_resid);
          const ErrStats er =
              compare(std::vector<double>(got_resid.begin(), got_resid.end()), ref_resid);
          EXPECT_EQ(e.nan, 0u);
          EXPECT_LE(e.max_rel, 1e-2) << "T=" << T << " H=" << H << " vec=" << vec;
          EXPECT_LE(er.max_rel, 1e-5) << "residual T=" << T << " H=" << H << " vec=" << vec;
          figure("rmsnorm_max_rel_T" + std::to_string(T) + "_H" + std::to_string(H) +
                     (with_delta ? "_res" : "") + (vec ? "_vec" : ""),
                 e.max_rel);
        }
      }
    }
  }
}

// The vectorized RMSNorm through a row list (the lm_head's final norm: rows gathered, residual
// updated in place only for the listed rows).
TEST(GpuKernels, RmsNormVecGatheredRows) {
  REQUIRE_GPU();
  std::mt19937_64 rng(15);
  const int T = 40, H = 4096;
  const std::vector<int> rows = {39, 0, 17, 5};
  std::normal_distribution<double> nd(0, 1);
  std::vector<float> resid(static_cast<std::size_t>(T) * H);
  for (auto& x : resid) x = static_cast<float>(nd(rng));
  const Bf16Data delta = random_bf16(resid.size(), 0.5, rng);
  const Bf16Data w = random_bf16(H, 0.2, rng);
  for (bool vec : {false, true}) {
    auto d_resid = to_device(resid);
    auto d_delta = to_device_bf16(delta.bits);
    auto d_w = to_device_bf16(w.bits);
    auto d_rows = to_device(rows);
    const int n = static_cast<int>(rows.size());
    DeviceArray<bf16> d_out(static_cast<std::size_t>(n) * H);
    poison(d_out);
    launch_rmsnorm({d_resid.get(),
                    d_delta.get(),
                    d_w.get(),
                    d_out.get(),
                    d_rows.get(),
                    n,
                    H,
                    1e-5f,
                    {},
                    0.0f,
                    vec},
                   nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> ref(static_cast<std::size_t>(n) * H), ref_resid(resid.begin(), resid.end());
    for (int r = 0; r < n; ++r) {
      const std::size_t src = static_cast<std::size_t>(rows[static_cast<std::size_t>(r)]);
      double ss = 0;
      for (int i = 0; i < H; ++i) {
        const std::size_t k = src * H + i;
        ref_resid[k] = resid[k] + delta.val[k];
        ss += ref_resid[k] * ref_resid[k];
      }
      const double inv = 1.0 / std::sqrt(ss / H + 1e-5);
      for (int i = 0; i < H; ++i)
        ref[static_cast<std::size_t>(r) * H + i] =
            ref_resid[src * H + i] * inv * w.val[static_cast<std::size_t>(i)];
    }
    const ErrStats e = compare(to_host_bf16(d_out.get(), ref.size()), ref);
    const auto got_resid = to_host(d_resid);
    const ErrStats er = compare(std::vector<double>(got_resid.begin(), got_resid.end()), ref_resid);
    EXPECT_EQ(e.nan + er.nan, 0u);
    EXPECT_LE(e.max_rel, 1e-2) << "vec=" << vec;
    EXPECT_LE(er.max_rel, 1e-5) << "residual (unlisted rows untouched) vec=" << vec;
  }
}

// Issue 19 item 2: the residual add in the GEMM epilogue (Gemm::linear_residual: resid += x . W^T
// in fp32, in place) and the RMSNorm after it without its add, against fp64 and against the
// unfused path (bf16 GEMM output, then the RMSNorm's add), at row counts of a small prefill and
// of the 8B shape's O projection (K = N = 4096). Random residuals, poisoned norm outputs.
TEST(GpuKernels, ResidualInGemmEpilogue) {
  REQUIRE_GPU();
  std::mt19937_64 rng(16);
  Gemm gemm(nullptr);
  struct Shape {
    int T, N, K;
  };
  for (const Shape sh : {Shape{3, 256, 256}, Shape{64, 256, 512}, Shape{300, 4096, 4096}}) {
    const int T = sh.T, N = sh.N, K = sh.K;
    const std::size_t TN = static_cast<std::size_t>(T) * N;
    std::normal_distribution<double> nd(0, 1);
    std::vector<float> resid(TN);
    for (auto& x : resid) x = static_cast<float>(nd(rng));
    const Bf16Data x = random_bf16(static_cast<std::size_t>(T) * K, 1.0, rng);
    const Bf16Data w = random_bf16(static_cast<std::size_t>(N) * K, 1.0 / std::sqrt(K), rng);
    const Bf16Data nw = random_bf16(N, 0.2, rng);
    // fp64 reference: resid + x . W^T, then the RMSNorm of it.
    std::vector<double> ref(TN), ref_norm(TN);
    parallel_for(T, [&](int t) {
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k)
          acc += x.val[static_cast<std::size_t>(t) * K + k] *
                 w.val[static_cast<std::size_t>(n) * K + k];
        ref[static_cast<std::size_t>(t) * N + n] = resid[static_cast<std::size_t>(t) * N + n] + acc;
      }
      double ss = 0;
      for (int n = 0; n < N; ++n)
        ss += ref[static_cast<std::size_t>(t) * N + n] * ref[static_cast<std::size_t>(t) * N + n];
      const double inv = 1.0 / std::sqrt(ss / N + 1e-5);
      for (int n = 0; n < N; ++n) {
        const std::size_t i = static_cast<std::size_t>(t) * N + n;
        ref_norm[i] = ref[i] * inv * nw.val[static_cast<std::size_t>(n)];
      }
    });
    auto d_x = to_device_bf16(x.bits);
    auto d_w = to_device_bf16(w.bits);
    auto d_nw = to_device_bf16(nw.bits);
    // Fused: resid += x . W^T in the GEMM, then the norm without delta.
    auto d_fused = to_device(resid);
    gemm.linear_residual(d_x.get(), d_w.get(), d_fused.get(), T, N, K);
    DeviceArray<bf16> d_out_f(TN);
    poison(d_out_f);
    launch_rmsnorm({.resid = d_fused.get(),
                    .delta = nullptr,
                    .weight = d_nw.get(),
                    .out = d_out_f.get(),
                    .rows = nullptr,
                    .num_rows = T,
                    .hidden = N,
                    .eps = 1e-5f,
                    .vec = true},
                   nullptr);
    // Unfused: bf16 y = x . W^T, then the norm adds it.
    auto d_unf = to_device(resid);
    DeviceArray<bf16> d_y(TN), d_out_u(TN);
    poison(d_out_u);
    gemm.linear(d_x.get(), d_w.get(), d_y.get(), T, N, K);
    launch_rmsnorm({.resid = d_unf.get(),
                    .delta = d_y.get(),
                    .weight = d_nw.get(),
                    .out = d_out_u.get(),
                    .rows = nullptr,
                    .num_rows = T,
                    .hidden = N,
                    .eps = 1e-5f,
                    .vec = true},
                   nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto hf = to_host(d_fused), hu = to_host(d_unf);
    const ErrStats ef = compare(std::vector<double>(hf.begin(), hf.end()), ref);
    const ErrStats eu = compare(std::vector<double>(hu.begin(), hu.end()), ref);
    const std::vector<double> hf_d(hf.begin(), hf.end());
    const ErrStats fu = compare(hf_d, std::vector<double>(hu.begin(), hu.end()));
    const ErrStats nf = compare(to_host_bf16(d_out_f.get(), TN), ref_norm);
    const ErrStats nu = compare(to_host_bf16(d_out_u.get(), TN), ref_norm);
    char tagbuf[64];
    std::snprintf(tagbuf, sizeof(tagbuf), "T%d_N%d_K%d", T, N, K);
    const std::string tag = tagbuf;
    EXPECT_EQ(ef.nan + nf.nan + nu.nan, 0u) << tag;
    // fp32 accumulation added to fp32 rows: no bf16 rounding of the product.
    EXPECT_LE(ef.rel_l2, 2e-5) << tag;
    // The unfused residual carries the product's bf16 rounding (<= 2^-9 of it).
    EXPECT_LE(eu.rel_l2, 4e-3) << tag;
    EXPECT_LE(fu.rel_l2, 4e-3) << tag;
    EXPECT_LE(ef.rel_l2, eu.rel_l2) << tag << ": the fused residual should be the closer one";
    // The norm outputs: the fused one within this file's element-wise bound. The unfused one
    // normalises a residual that carries the product's bf16 rounding, which is large relative
    // to elements near zero (max rel 0.09-0.87 on the H200, 2026-12-02): bounded in L2 only.
    EXPECT_LE(nf.max_rel, 1e-2) << tag;
    EXPECT_LE(nu.rel_l2, 1e-2) << tag;
    figure("resid_epilogue_rel_l2_" + tag, ef.rel_l2);
    figure("resid_unfused_rel_l2_" + tag, eu.rel_l2);
    figure("resid_epilogue_norm_max_rel_" + tag, nf.max_rel);
  }
}

// Diagnostic for GpuSparseModel.MixedBatchEqualsAlone (its 1e-4 bound assumes a row's GEMM
// result does not depend on how many rows share the launch): the first rows of a T-row launch
// against the same rows alone in a smaller launch, bitwise, for the residual epilogue (tiny
// model's O / down shapes, prefill 64 vs 192 rows) and cuBLAS's bf16 GEMM with the skinny kernel
// off (decode: 1 vs 3 and 4 rows). cuBLAS promises no such invariance: figures only (differing
// elements; 0 expected from the H200 runs before the skinny kernel).
TEST(GpuKernels, GemmRowsIndependentOfRowCount) {
  REQUIRE_GPU();
  std::mt19937_64 rng(17);
  Gemm gemm(nullptr);
  gemm.set_skinny(false);
  struct Case {
    int small, big, N, K;
    bool resid;
  };
  for (const Case c : {Case{64, 192, 256, 256, true}, Case{64, 192, 256, 512, true},
                       Case{1, 3, 256, 256, false}, Case{1, 4, 512, 256, false}}) {
    const Bf16Data x = random_bf16(static_cast<std::size_t>(c.big) * c.K, 1.0, rng);
    const Bf16Data w = random_bf16(static_cast<std::size_t>(c.N) * c.K, 1.0 / std::sqrt(c.K), rng);
    std::normal_distribution<double> nd(0, 1);
    std::vector<float> resid(static_cast<std::size_t>(c.big) * c.N);
    for (auto& v : resid) v = static_cast<float>(nd(rng));
    auto d_x = to_device_bf16(x.bits);
    auto d_w = to_device_bf16(w.bits);
    std::size_t differ = 0;
    const std::size_t n_small = static_cast<std::size_t>(c.small) * c.N;
    if (c.resid) {
      auto a = to_device(resid), b = to_device(resid);
      gemm.linear_residual(d_x.get(), d_w.get(), a.get(), c.small, c.N, c.K);
      gemm.linear_residual(d_x.get(), d_w.get(), b.get(), c.big, c.N, c.K);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto ha = to_host(a), hb = to_host(b);
      for (std::size_t i = 0; i < n_small; ++i) differ += ha[i] != hb[i];
    } else {
      DeviceArray<bf16> a(n_small), b(static_cast<std::size_t>(c.big) * c.N);
      gemm.linear(d_x.get(), d_w.get(), a.get(), c.small, c.N, c.K);
      gemm.linear(d_x.get(), d_w.get(), b.get(), c.big, c.N, c.K);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto ha = to_host_bf16(a.get(), n_small), hb = to_host_bf16(b.get(), n_small);
      for (std::size_t i = 0; i < n_small; ++i) differ += ha[i] != hb[i];
    }
    char name[96];
    std::snprintf(name, sizeof(name), "gemm_%s_rows_differ_T%d_vs_T%d_N%d_K%d",
                  c.resid ? "resid" : "bf16", c.small, c.big, c.N, c.K);
    figure(name, static_cast<double>(differ));
  }
}

TEST(GpuKernels, EmbeddingAndSwiglu) {
  REQUIRE_GPU();
  std::mt19937_64 rng(12);
  const int V = 1000, H = 384, T = 17, I = 1000;
  const Bf16Data emb = random_bf16(static_cast<std::size_t>(V) * H, 1.0, rng);
  std::vector<int> toks(T);
  for (auto& t : toks) t = static_cast<int>(rng() % V);
  auto d_emb = to_device_bf16(emb.bits);
  auto d_tok = to_device(toks);
  DeviceArray<float> d_res(static_cast<std::size_t>(T) * H);
  poison(d_res);
  launch_embedding({d_tok.get(), d_emb.get(), d_res.get(), T, H}, nullptr);
  const Bf16Data gu = random_bf16(static_cast<std::size_t>(T) * 2 * I, 2.0, rng);
  auto d_gu = to_device_bf16(gu.bits);
  DeviceArray<bf16> d_act(static_cast<std::size_t>(T) * I);
  poison(d_act);
  launch_swiglu({d_gu.get(), d_act.get(), T, I}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto res = to_host(d_res);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < H; ++i)
      ASSERT_EQ(res[static_cast<std::size_t>(t) * H + i],
                emb.val[static_cast<std::size_t>(toks[static_cast<std::size_t>(t)]) * H + i]);
  std::vector<double> ref(static_cast<std::size_t>(T) * I);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < I; ++j) {
      const double g = gu.val[static_cast<std::size_t>(t) * 2 * I + j],
                   u = gu.val[static_cast<std::size_t>(t) * 2 * I + I + j];
      ref[static_cast<std::size_t>(t) * I + j] = g / (1 + std::exp(-g)) * u;
    }
  const ErrStats e = compare(to_host_bf16(d_act.get(), ref.size()), ref);
  EXPECT_EQ(e.nan, 0u);
  EXPECT_LE(e.max_rel, 1e-2);
  figure("swiglu_max_rel", e.max_rel);
}

// The 16-byte SwiGLU (issue 19 item 2) against fp64 and bit-identical to the scalar kernel. I =
// 1000: 125 chunks (one partial block); 2056: 257 chunks (a second block of one thread); 14336:
// the 8B shape; 1001: not a multiple of 8 (the scalar kernel).
TEST(GpuKernels, SwigluVec) {
  REQUIRE_GPU();
  std::mt19937_64 rng(16);
  for (int I : {1000, 2056, 14336, 1001}) {
    const int T = 19;
    const Bf16Data gu = random_bf16(static_cast<std::size_t>(T) * 2 * I, 2.0, rng);
    auto d_gu = to_device_bf16(gu.bits);
    DeviceArray<bf16> d_vec(static_cast<std::size_t>(T) * I), d_ref(d_vec.size());
    poison(d_vec);
    poison(d_ref);
    launch_swiglu({d_gu.get(), d_ref.get(), T, I}, nullptr);
    launch_swiglu({d_gu.get(), d_vec.get(), T, I, {}, 0.0f, true}, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<double> ref(static_cast<std::size_t>(T) * I);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < I; ++j) {
        const double g = gu.val[static_cast<std::size_t>(t) * 2 * I + j],
                     u = gu.val[static_cast<std::size_t>(t) * 2 * I + I + j];
        ref[static_cast<std::size_t>(t) * I + j] = g / (1 + std::exp(-g)) * u;
      }
    const auto got = to_host_bf16(d_vec.get(), ref.size());
    const ErrStats e = compare(got, ref);
    EXPECT_EQ(e.nan, 0u) << "I=" << I;
    EXPECT_LE(e.max_rel, 1e-2) << "I=" << I;
    EXPECT_EQ(compare(got, to_host_bf16(d_ref.get(), ref.size())).max_abs, 0.0)
        << "vec differs from the scalar kernel, I=" << I;
    figure("swiglu_vec_max_rel_I" + std::to_string(I), e.max_rel);
  }
}

// RoPE (llama3 scaling) on q and k in place and the K/V write into scattered pages; the cached
// cos/sin table (RopeKvParams::cos_sin) gives the same bits as the per-use sincos.
TEST(GpuKernels, RopeAndKvWrite) {
  REQUIRE_GPU();
  std::mt19937_64 rng(13);
  struct Case {
    int heads, kv_heads, hd;
  };
  // hd 96: 6 chunks of 8 pairs per head (vec); hd 72: not a multiple of 16 (the scalar kernel).
  for (bool vec : {false, true})
    for (const Case c :
         {Case{4, 2, 64}, Case{32, 8, 128}, Case{8, 1, 128}, Case{6, 3, 96}, Case{4, 2, 72}}) {
      ModelConfig mc = preset_config("llama3-8b");
      mc.head_dim = c.hd;
      const std::vector<double> inv = mc.rope_inv_freq();
      const int T = 37, row = (c.heads + 2 * c.kv_heads) * c.hd;
      const KvLayout layout{c.kv_heads, c.hd, 2};
      const int num_seqs = 3, table_stride = 300, num_pages = num_seqs * table_stride;
      std::vector<int> pos(T), seq_of(T), table(static_cast<std::size_t>(num_seqs) * table_stride);
      std::vector<int> perm(num_pages);
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (std::size_t i = 0; i < table.size(); ++i) table[i] = perm[i];
      for (int t = 0; t < T; ++t) {
        seq_of[static_cast<std::size_t>(t)] = t % num_seqs;
        // positions: 0, 1, 17, 4095, random up to 4800 (distinct per sequence)
        pos[static_cast<std::size_t>(t)] =
            t < 3 ? std::vector<int>{0, 1, 17}[static_cast<std::size_t>(t)]
                  : (t == 3 ? 4095 : 18 + t * 123);
      }
      seq_of[static_cast<std::size_t>(T - 1)] = -1;  // padding row: untouched
      const Bf16Data x = random_bf16(static_cast<std::size_t>(T) * row, 1.0, rng);
      auto d_x = to_device_bf16(x.bits);
      auto d_pos = to_device(pos);
      auto d_seq = to_device(seq_of);
      auto d_table = to_device(table);
      auto d_inv = to_device(inv);
      DeviceArray<bf16> pool(static_cast<std::size_t>(num_pages) * layout.page_elems());
      poison(pool);
      launch_rope_kv_write({d_x.get(), d_pos.get(), d_seq.get(), d_table.get(), table_stride,
                            d_inv.get(), pool.get(), static_cast<long long>(layout.page_elems()), T,
                            c.heads, c.kv_heads, c.hd, nullptr, 0, vec},
                           nullptr);
      CUDA_CHECK(cudaDeviceSynchronize());
      const auto got = to_host_bf16(d_x.get(), x.val.size());
      const auto got_pool = to_host_bf16(pool.get(), pool.size());
      std::vector<double> ref = x.val, ref_k, got_k, ref_v, got_v;
      const int half = c.hd / 2;
      {
        // The cached cos/sin (RopeKvParams::cos_sin over positions [0, 4096): 4095 inside it,
        // the later ones past it) gives the bits of the per-use sincos.
        DeviceArray<float2> tab(static_cast<std::size_t>(4096) * half);
        launch_rope_table(tab.get(), d_inv.get(), half, 4096, nullptr);
        auto d_x2 = to_device_bf16(x.bits);
        DeviceArray<bf16> pool2(pool.size());
        poison(pool2);
        RopeKvParams p2{d_x2.get(),
                        d_pos.get(),
                        d_seq.get(),
                        d_table.get(),
                        table_stride,
                        d_inv.get(),
                        pool2.get(),
                        static_cast<long long>(layout.page_elems()),
                        T,
                        c.heads,
                        c.kv_heads,
                        c.hd,
                        nullptr,
                        0,
                        vec};
        p2.cos_sin = tab.get();
        p2.table_positions = 4096;
        launch_rope_kv_write(p2, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto got2 = to_host_bf16(d_x2.get(), x.val.size());
        const auto got_pool2 = to_host_bf16(pool2.get(), pool2.size());
        auto same = [](const std::vector<double>& a, const std::vector<double>& b) {
          if (a.size() != b.size()) return false;
          for (std::size_t i = 0; i < a.size(); ++i)
            if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
          return true;
        };
        EXPECT_TRUE(same(got, got2)) << "hd " << c.hd << " vec=" << vec << ": q/k differ";
        EXPECT_TRUE(same(got_pool, got_pool2)) << "hd " << c.hd << " vec=" << vec << ": pages";
      }
      for (int t = 0; t < T; ++t) {
        if (seq_of[static_cast<std::size_t>(t)] < 0) continue;
        double* r = ref.data() + static_cast<std::size_t>(t) * row;
        for (int h = 0; h < c.heads + c.kv_heads; ++h)
          for (int i = 0; i < half; ++i) {
            const double a = r[h * c.hd + i], b = r[h * c.hd + i + half];
            const double ang = pos[static_cast<std::size_t>(t)] * inv[static_cast<std::size_t>(i)];
            r[h * c.hd + i] = a * std::cos(ang) - b * std::sin(ang);
            r[h * c.hd + i + half] = b * std::cos(ang) + a * std::sin(ang);
          }
        const int p = pos[static_cast<std::size_t>(t)];
        const int page =
            table[static_cast<std::size_t>(seq_of[static_cast<std::size_t>(t)]) * table_stride +
                  p / 16];
        for (int g = 0; g < c.kv_heads; ++g)
          for (int d = 0; d < c.hd; ++d) {
            ref_k.push_back(r[(c.heads + g) * c.hd + d]);
            ref_v.push_back(r[(c.heads + c.kv_heads + g) * c.hd + d]);
            got_k.push_back(got_pool[page * layout.page_elems() + layout.k_offset(g, p % 16) + d]);
            got_v.push_back(got_pool[page * layout.page_elems() + layout.v_offset(g, p % 16) + d]);
          }
      }
      const ErrStats e = compare(got, ref), ek = compare(got_k, ref_k), ev = compare(got_v, ref_v);
      EXPECT_EQ(e.nan + ek.nan + ev.nan, 0u);
      EXPECT_LE(e.max_rel, 1e-2) << "hd " << c.hd << " vec=" << vec;
      EXPECT_LE(ek.max_rel, 1e-2) << "hd " << c.hd << " vec=" << vec;
      EXPECT_EQ(ev.max_abs, 0.0) << "hd " << c.hd << " vec=" << vec;
      figure("rope_max_rel_hd" + std::to_string(c.hd) + "_g" +
                 std::to_string(c.heads / c.kv_heads) + (vec ? "_vec" : ""),
             e.max_rel);
    }
}

TEST(GpuKernels, RandomFillMatchesMakeModel) {
  REQUIRE_GPU();
  const std::string name = "model.layers.3.mlp.up_proj.weight";
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  const long long n = 100003;
  DeviceArray<bf16> d(static_cast<std::size_t>(n));
  poison(d);
  launch_random_fill({d.get(), n, 42, h, 0.05f, 0.5f}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = to_host_bf16(d.get(), static_cast<std::size_t>(n));
  for (long long i = 0; i < n; ++i)
    ASSERT_EQ(got[static_cast<std::size_t>(i)],
              bf16_to_float(float_to_bf16(
                  0.5f + random_weight(42, name, static_cast<std::uint64_t>(i), 0.05f))))
        << i;
}

TEST(GpuKernels, ArgmaxLowestIdOnTies) {
  REQUIRE_GPU();
  std::mt19937_64 rng(14);
  const int rows = 5, V = 128256;
  std::vector<float> logits(static_cast<std::size_t>(rows) * V);
  std::normal_distribution<float> nd(0, 3);
  for (auto& x : logits) x = nd(rng);
  std::vector<int> expect(rows);
  for (int r = 0; r < rows; ++r) {
    const int a = static_cast<int>(rng() % V), b = static_cast<int>(rng() % V);
    logits[static_cast<std::size_t>(r) * V + a] = 100.0f;
    logits[static_cast<std::size_t>(r) * V + b] = 100.0f;
    expect[static_cast<std::size_t>(r)] = std::min(a, b);
  }
  auto d_l = to_device(logits);
  DeviceArray<int> d_out(rows);
  DeviceArray<float> d_logz(rows);
  poison(d_out);
  launch_argmax({d_l.get(), d_out.get(), rows, V}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(to_host(d_out), expect);
  // With log_z: the same argmax, and log sum exp(row - max) against fp64 (the greedy token's
  // logprob is -log_z, recorded for the quality guardrail).
  poison(d_out);
  poison(d_logz);
  launch_argmax(
      {.logits = d_l.get(), .out = d_out.get(), .rows = rows, .vocab = V, .log_z = d_logz.get()},
      nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(to_host(d_out), expect);
  const auto lz = to_host(d_logz);
  for (int r = 0; r < rows; ++r) {
    double mx = -INFINITY, z = 0.0;
    for (int i = 0; i < V; ++i)
      mx = std::max(mx, static_cast<double>(logits[static_cast<std::size_t>(r) * V + i]));
    for (int i = 0; i < V; ++i)
      z += std::exp(static_cast<double>(logits[static_cast<std::size_t>(r) * V + i]) - mx);
    EXPECT_NEAR(lz[static_cast<std::size_t>(r)], std::log(z), 1e-5) << "row " << r;
  }
}

}  // namespace
}  // namespace strata::gputest
