// The skinny GEMM kernel (cuda/gemm_skinny.cu, 1..kSkinnyMaxRows rows) against an fp64 CPU
// reference on random bf16 inputs, bf16 and fp32 outputs, N not a multiple of the block's rows,
// K of every 8B-layer shape; its output is bitwise repeatable, equal in a CUDA graph, and Gemm
// routes small row counts to it unless told not to.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/gemm.h"
#include "cuda/gemm_skinny_fused.h"
#include "cuda/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::gputest {
namespace {

std::vector<double> download_y(const void* y, std::size_t n, bool f32) {
  std::vector<double> out(n);
  if (f32) {
    std::vector<float> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), y, n * 4, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) out[i] = h[i];
  } else {
    out = to_host_bf16(static_cast<const bf16*>(y), n);
  }
  return out;
}

TEST(GpuGemmSkinny, MatchesFp64ReferenceEveryRowCount) {
  REQUIRE_GPU();
  std::mt19937_64 rng(31);
  struct S {
    int N, K;
  };
  for (const S s : {S{1003, 4096}, S{64, 14336}, S{6144, 4096}, S{5, 8}, S{37, 136}}) {
    const int T = cuda::kSkinnyMaxRows;
    const Bf16Data x = random_bf16(static_cast<std::size_t>(T) * s.K, 1.0, rng);
    const Bf16Data w = random_bf16(static_cast<std::size_t>(s.N) * s.K,
                                   1.0 / std::sqrt(static_cast<double>(s.K)), rng);
    auto dx = to_device_bf16(x.bits);
    auto dw = to_device_bf16(w.bits);
    std::vector<double> ref(static_cast<std::size_t>(T) * s.N);
    parallel_for(s.N, [&](int n) {
      for (int t = 0; t < T; ++t) {
        double acc = 0;
        for (int k = 0; k < s.K; ++k)
          acc += x.val[static_cast<std::size_t>(t) * s.K + k] *
                 w.val[static_cast<std::size_t>(n) * s.K + k];
        ref[static_cast<std::size_t>(t) * s.N + n] = acc;
      }
    });
    for (const bool f32 : {false, true})
      for (int rows = 1; rows <= T; ++rows) {
        char tagbuf[64];
        std::snprintf(tagbuf, sizeof tagbuf, "N%d_K%d_T%d_%s", s.N, s.K, rows,
                      f32 ? "f32" : "bf16");
        const std::string tag = tagbuf;
        SCOPED_TRACE(tag);
        ASSERT_TRUE(cuda::skinny_gemm_applies(dx.get(), dw.get(), dx.get(), rows, s.N, s.K));
        const std::size_t n = static_cast<std::size_t>(rows) * s.N;
        DeviceArray<unsigned char> y(n * 4);
        CUDA_CHECK(cudaMemset(y.get(), 0xFF, y.bytes()));  // NaN poison
        cuda::launch_skinny_gemm(dx.get(), dw.get(), y.get(), f32, rows, s.N, s.K, nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const auto got = download_y(y.get(), n, f32);
        const ErrStats e =
            compare(got, std::vector<double>(ref.begin(), ref.begin() + static_cast<long>(n)));
        EXPECT_EQ(e.nan, 0u);
        // fp32 accumulation over K; bf16 output rounding (2^-9 relative) dominates there.
        EXPECT_LE(e.rel_l2, f32 ? 1e-5 : 4e-3);
        if (rows == T) figure("gemm_skinny_rel_l2_" + tag, e.rel_l2);
        // Bitwise repeatable (fixed-order reduction).
        std::vector<unsigned char> first(y.bytes()), again(y.bytes());
        CUDA_CHECK(cudaMemcpy(first.data(), y.get(), y.bytes(), cudaMemcpyDeviceToHost));
        cuda::launch_skinny_gemm(dx.get(), dw.get(), y.get(), f32, rows, s.N, s.K, nullptr);
        CUDA_CHECK(cudaMemcpy(again.data(), y.get(), y.bytes(), cudaMemcpyDeviceToHost));
        EXPECT_EQ(std::memcmp(first.data(), again.data(), first.size()), 0);
      }
  }
}

// Gemm::linear routes 1..8 rows to the skinny kernel (eagerly and in a graph, same bits), and
// to cuBLAS with set_skinny(false); the two agree within bf16 rounding.
TEST(GpuGemmSkinny, GemmRoutesSmallRowCountsAndGraphsMatch) {
  REQUIRE_GPU();
  std::mt19937_64 rng(32);
  const int N = 4096, K = 4096, T = 2;
  const Bf16Data x = random_bf16(static_cast<std::size_t>(T) * K, 1.0, rng);
  const Bf16Data w = random_bf16(static_cast<std::size_t>(N) * K, 1.0 / 64, rng);
  auto dx = to_device_bf16(x.bits);
  auto dw = to_device_bf16(w.bits);
  DeviceArray<bf16> y1(static_cast<std::size_t>(T) * N), y2(y1.size()), y3(y1.size());
  cudaStream_t st = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cuda::Gemm g(st), lib(st);
  lib.set_skinny(false);
  EXPECT_TRUE(g.skinny());
  g.linear(dx.get(), dw.get(), y1.get(), T, N, K);
  lib.linear(dx.get(), dw.get(), y2.get(), T, N, K);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  g.linear(dx.get(), dw.get(), y3.get(), T, N, K);
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  cudaGraphExec_t ex = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&ex, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(ex, st));
  CUDA_CHECK(cudaStreamSynchronize(st));
  const auto a = to_host_bf16(y1.get(), y1.size()), b = to_host_bf16(y2.get(), y2.size()),
             c = to_host_bf16(y3.get(), y3.size());
  EXPECT_EQ(a, c) << "graph replay differs from the eager call";
  EXPECT_LE(compare(a, b).rel_l2, 1e-2) << "skinny vs cuBLAS";
  EXPECT_NE(a, b) << "both paths gave identical bits: is the skinny kernel used at all?";
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
}

// Issue 18 item 3: the fused skinny kernels (cuda/gemm_skinny_fused.h) in the three uses of the
// decode layer - RMSNorm + GEMM into bf16 (qkv, gate_up), bf16 GEMM + residual add (o), SwiGLU +
// GEMM + residual add (down) - against an fp64 reference, every row count, with and without
// programmatic dependent launch; bitwise repeatable, and a graph replay equals the eager call.
TEST(GpuGemmSkinny, FusedMatchesFp64Reference) {
  REQUIRE_GPU();
  std::mt19937_64 rng(33);
  const int T = cuda::kSkinnyMaxRows;
  const float eps = 1e-5f;
  struct S {
    cuda::SkinnyIn in;
    int N, K;
  };
  cudaStream_t st = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (const S s : {S{cuda::SkinnyIn::kNorm, 6144, 4096}, S{cuda::SkinnyIn::kNorm, 1003, 4096},
                    S{cuda::SkinnyIn::kBf16, 4096, 4096}, S{cuda::SkinnyIn::kSwiglu, 4096, 14336},
                    S{cuda::SkinnyIn::kNorm, 37, 136}, S{cuda::SkinnyIn::kSwiglu, 37, 136}}) {
    const bool norm = s.in == cuda::SkinnyIn::kNorm, swiglu = s.in == cuda::SkinnyIn::kSwiglu;
    const bool resid_out = !norm;  // the decode layer's combinations
    const Bf16Data w = random_bf16(static_cast<std::size_t>(s.N) * s.K,
                                   1.0 / std::sqrt(static_cast<double>(s.K)), rng);
    const Bf16Data x = random_bf16(static_cast<std::size_t>(T) * s.K * (swiglu ? 2 : 1), 1.0, rng);
    const Bf16Data gamma = random_bf16(static_cast<std::size_t>(s.K), 0.3, rng);
    std::normal_distribution<double> nd(0.0, 2.0);
    std::vector<float> rin(static_cast<std::size_t>(T) * s.K),
        r0(static_cast<std::size_t>(T) * s.N);
    for (auto& v : rin) v = static_cast<float>(nd(rng));
    for (auto& v : r0) v = static_cast<float>(nd(rng));
    auto dw = to_device_bf16(w.bits);
    auto dx = to_device_bf16(x.bits);
    auto dg = to_device_bf16(gamma.bits);
    auto drin = to_device(rin);
    // fp64 reference of the inputs the kernel multiplies, then of the outputs.
    std::vector<double> xin(static_cast<std::size_t>(T) * s.K);
    for (int t = 0; t < T; ++t) {
      double inv = 1.0;
      if (norm) {
        double ss = 0;
        for (int k = 0; k < s.K; ++k) ss += double(rin[t * s.K + k]) * rin[t * s.K + k];
        inv = 1.0 / std::sqrt(ss / s.K + eps);
      }
      for (int k = 0; k < s.K; ++k) {
        const std::size_t i = static_cast<std::size_t>(t) * s.K + k;
        if (norm) {
          xin[i] = rin[i] * gamma.val[k] * inv;
        } else if (swiglu) {
          const double g = x.val[static_cast<std::size_t>(t) * 2 * s.K + k],
                       u = x.val[static_cast<std::size_t>(t) * 2 * s.K + s.K + k];
          xin[i] = g / (1.0 + std::exp(-g)) * u;
        } else {
          xin[i] = x.val[i];
        }
      }
    }
    std::vector<double> ref(static_cast<std::size_t>(T) * s.N);
    parallel_for(s.N, [&](int n) {
      for (int t = 0; t < T; ++t) {
        double acc = 0;
        for (int k = 0; k < s.K; ++k)
          acc += xin[static_cast<std::size_t>(t) * s.K + k] *
                 w.val[static_cast<std::size_t>(n) * s.K + k];
        ref[static_cast<std::size_t>(t) * s.N + n] = acc;
      }
    });
    for (int rows = 1; rows <= T; ++rows)
      for (const bool pdl : {false, true}) {
        char tagbuf[80];
        std::snprintf(tagbuf, sizeof tagbuf, "in%d_N%d_K%d_T%d%s", static_cast<int>(s.in), s.N, s.K,
                      rows, pdl ? "_pdl" : "");
        const std::string tag = tagbuf;
        SCOPED_TRACE(tag);
        const std::size_t n = static_cast<std::size_t>(rows) * s.N;
        DeviceArray<bf16> y(n);
        DeviceArray<float> resid(n);
        cuda::SkinnyFusedParams p{.w = dw.get(), .T = rows, .N = s.N, .K = s.K, .in = s.in};
        p.x = dx.get();
        p.gu = dx.get();
        p.resid_in = drin.get();
        p.gamma = dg.get();
        p.eps = eps;
        p.pdl = pdl;
        if (resid_out)
          p.resid_out = resid.get();
        else
          p.y = y.get();
        ASSERT_TRUE(cuda::skinny_fused_applies(p));
        auto reset = [&] {
          CUDA_CHECK(cudaMemcpyAsync(resid.get(), r0.data(), n * 4, cudaMemcpyHostToDevice, st));
          CUDA_CHECK(cudaMemsetAsync(y.get(), 0xFF, n * 2, st));  // NaN poison
        };
        auto run_get = [&] {
          reset();
          cuda::launch_skinny_fused(p, st);
          CUDA_CHECK(cudaStreamSynchronize(st));
          std::vector<unsigned char> out(resid_out ? n * 4 : n * 2);
          CUDA_CHECK(cudaMemcpy(out.data(), resid_out ? static_cast<void*>(resid.get()) : y.get(),
                                out.size(), cudaMemcpyDeviceToHost));
          return out;
        };
        const std::vector<unsigned char> first = run_get();
        std::vector<double> got(n), want(n);
        for (std::size_t i = 0; i < n; ++i) {
          if (resid_out) {
            float f;
            std::memcpy(&f, first.data() + 4 * i, 4);
            got[i] = f - r0[i];  // the product: the add itself is exact to fp32 rounding
          } else {
            std::uint16_t b;
            std::memcpy(&b, first.data() + 2 * i, 2);
            const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
            float f;
            std::memcpy(&f, &u, 4);
            got[i] = f;
          }
          want[i] = ref[i];
        }
        const ErrStats e = compare(got, want);
        EXPECT_EQ(e.nan, 0u);
        // bf16 output: its rounding (2^-9); residual out: fp32 sums (the subtraction of r0
        // costs ~|r0| 2^-24 per element); SwiGLU: x rounded to bf16 as the unfused kernel.
        EXPECT_LE(e.rel_l2, swiglu ? 4e-3 : (resid_out ? 1e-4 : 4e-3));
        if (rows == T) figure("gemm_skinny_fused_rel_l2_" + tag, e.rel_l2);
        EXPECT_EQ(run_get(), first) << "not bitwise repeatable";
        // Graph replay (with the programmatic edge when pdl) equals the eager call.
        reset();
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        cuda::launch_skinny_fused(p, st);
        CUDA_CHECK(cudaStreamEndCapture(st, &graph));
        cudaGraphExec_t ex = nullptr;
        CUDA_CHECK(cudaGraphInstantiate(&ex, graph, 0));
        CUDA_CHECK(cudaGraphLaunch(ex, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
        std::vector<unsigned char> g(first.size());
        CUDA_CHECK(cudaMemcpy(g.data(), resid_out ? static_cast<void*>(resid.get()) : y.get(),
                              g.size(), cudaMemcpyDeviceToHost));
        EXPECT_EQ(g, first) << "graph replay differs from the eager call";
        cudaGraphExecDestroy(ex);
        cudaGraphDestroy(graph);
      }
  }
  cudaStreamDestroy(st);
}

// The fused kernels against the unfused sequence they replace, on the same inputs: SwiGLU + down
// + residual equals launch_swiglu (16-byte kernel) + launch_skinny_gemm (fp32 out) + the add
// bitwise up to the add's rounding (same x, same summation order); RMSNorm + qkv within the bf16
// rounding of the normed row the unfused path makes.
TEST(GpuGemmSkinny, FusedMatchesUnfusedSequence) {
  REQUIRE_GPU();
  std::mt19937_64 rng(34);
  const int T = cuda::kSkinnyMaxRows, H = 4096, I = 14336, N = 6144;
  const Bf16Data wd = random_bf16(static_cast<std::size_t>(H) * I, 1.0 / std::sqrt(I * 1.0), rng);
  const Bf16Data wq = random_bf16(static_cast<std::size_t>(N) * H, 1.0 / 64, rng);
  const Bf16Data gu = random_bf16(static_cast<std::size_t>(T) * 2 * I, 1.0, rng);
  const Bf16Data gamma = random_bf16(static_cast<std::size_t>(H), 0.3, rng);
  std::normal_distribution<double> nd(0.0, 2.0);
  std::vector<float> r0(static_cast<std::size_t>(T) * H);
  for (auto& v : r0) v = static_cast<float>(nd(rng));
  auto dwd = to_device_bf16(wd.bits);
  auto dwq = to_device_bf16(wq.bits);
  auto dgu = to_device_bf16(gu.bits);
  auto dg = to_device_bf16(gamma.bits);
  DeviceArray<float> resid(r0.size()), prod(r0.size());
  DeviceArray<bf16> act(static_cast<std::size_t>(T) * I), normed(r0.size()),
      y1(static_cast<std::size_t>(T) * N), y2(y1.size());
  CUDA_CHECK(cudaMemcpy(resid.get(), r0.data(), r0.size() * 4, cudaMemcpyHostToDevice));
  cuda::launch_swiglu({.gu = dgu.get(), .out = act.get(), .num_tokens = T, .inter = I, .vec = true},
                      nullptr);
  cuda::launch_skinny_gemm(act.get(), dwd.get(), prod.get(), true, T, H, I, nullptr);
  cuda::launch_skinny_fused({.w = dwd.get(),
                             .T = T,
                             .N = H,
                             .K = I,
                             .in = cuda::SkinnyIn::kSwiglu,
                             .gu = dgu.get(),
                             .resid_out = resid.get()},
                            nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = to_host(resid), p = to_host(prod);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], r0[i] + p[i]) << "element " << i;
  // RMSNorm (on the residual above) + qkv.
  cuda::launch_rmsnorm({.resid = resid.get(),
                        .delta = nullptr,
                        .weight = dg.get(),
                        .out = normed.get(),
                        .rows = nullptr,
                        .num_rows = T,
                        .hidden = H,
                        .eps = 1e-5f,
                        .vec = true},
                       nullptr);
  cuda::launch_skinny_gemm(normed.get(), dwq.get(), y1.get(), false, T, N, H, nullptr);
  cuda::launch_skinny_fused({.w = dwq.get(),
                             .T = T,
                             .N = N,
                             .K = H,
                             .in = cuda::SkinnyIn::kNorm,
                             .resid_in = resid.get(),
                             .gamma = dg.get(),
                             .eps = 1e-5f,
                             .y = y2.get()},
                            nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto a = to_host_bf16(y1.get(), y1.size()), b = to_host_bf16(y2.get(), y2.size());
  const double rel = compare(b, a).rel_l2;
  EXPECT_LE(rel, 4e-3) << "fused norm + qkv vs rmsnorm + skinny";
  figure("gemm_skinny_fused_vs_unfused_norm_qkv_rel_l2", rel);
}

}  // namespace
}  // namespace strata::gputest
