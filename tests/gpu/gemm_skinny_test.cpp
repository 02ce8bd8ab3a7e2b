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

}  // namespace
}  // namespace strata::gputest
