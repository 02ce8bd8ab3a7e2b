// Decode GEMM autotuning (cuda/gemm.h): after autotune(), linear() with a tuned (N, K, T)
// runs the kept cublasLt algorithm — eagerly and captured in a CUDA graph — and its output
// agrees with cuBLAS's default on the same inputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::cuda {
namespace {

using gputest::figure;

double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d, den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::isfinite(num) && den > 0 ? std::sqrt(num / den) : 1e9;
}

// y as floats (bf16 or fp32 storage).
std::vector<float> download(const void* y, std::size_t n, bool f32) {
  std::vector<float> out(n);
  if (f32) {
    CUDA_CHECK(cudaMemcpy(out.data(), y, n * 4, cudaMemcpyDeviceToHost));
  } else {
    std::vector<std::uint16_t> raw(n);
    CUDA_CHECK(cudaMemcpy(raw.data(), y, n * 2, cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_float(raw[i]);
  }
  return out;
}

TEST(GpuGemmTune, TunedCallsMatchDefaultEagerAndInGraphs) {
  REQUIRE_GPU();
  cudaStream_t st = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  struct S {
    const char* name;
    int N, K;
    bool f32;
  };
  const S shapes[] = {
      {"qkv", 6144, 4096, false}, {"down", 4096, 14336, false}, {"lm_head", 32000, 4096, true}};
  const std::vector<int> rows = {1, 8, 64};
  std::vector<DeviceArray<bf16>> ws;
  std::vector<GemmShape> gs;
  for (const S& s : shapes) {
    ws.emplace_back(static_cast<std::size_t>(s.N) * s.K);
    launch_random_fill({ws.back().get(), static_cast<long long>(ws.back().size()), 11, 0x51ull,
                        1.0f / std::sqrt(static_cast<float>(s.K)), 0.0f},
                       st);
    gs.push_back({s.name, s.N, s.K, s.f32, ws.back().get()});
  }
  DeviceArray<bf16> x(64ull * 14336);
  launch_random_fill({x.get(), static_cast<long long>(x.size()), 12, 0x52ull, 1.0f, 0.0f}, st);
  DeviceArray<float> y_ref(64ull * 32000), y_t(64ull * 32000);
  CUDA_CHECK(cudaStreamSynchronize(st));

  Gemm plain(st), tuned(st);
  plain.set_skinny(false);  // the reference: cuBLAS's default
  const std::vector<GemmTuneResult> res = tuned.autotune(gs, rows, 5000.0);
  ASSERT_EQ(res.size(), 3u * rows.size());
  int lt = 0;
  for (const auto& r : res) {
    EXPECT_GT(r.default_us, 0.0) << r.name << " T=" << r.T;
    EXPECT_LE(r.best_us, r.default_us) << r.name << " T=" << r.T;
    EXPECT_GT(r.candidates, 0) << r.name << " T=" << r.T << ": no cublasLt candidate";
    lt += r.chosen.rfind("lt ", 0) == 0;
    std::printf("%-8s T=%-3d default %.1f us, best %.1f us: %s (%d candidates, %d rejected)\n",
                r.name.c_str(), r.T, r.default_us, r.best_us, r.chosen.c_str(), r.candidates,
                r.rejected);
    figure("gemm_tune_" + r.name + "_t" + std::to_string(r.T) + "_speedup",
           r.default_us / r.best_us);
  }
  EXPECT_EQ(lt, tuned.tuned_count());
  for (const S& s : shapes)
    for (int T : rows) {
      SCOPED_TRACE(std::string(s.name) + " T=" + std::to_string(T));
      const std::size_t n = static_cast<std::size_t>(T) * s.N;
      auto call = [&](Gemm& g, void* y) {
        if (s.f32)
          g.linear_f32out(x.get(), ws[&s - shapes].get(), static_cast<float*>(y), T, s.N, s.K);
        else
          g.linear(x.get(), ws[&s - shapes].get(), static_cast<bf16*>(y), T, s.N, s.K);
      };
      call(plain, y_ref.get());
      CUDA_CHECK(cudaMemsetAsync(y_t.get(), 0xFF, y_t.bytes(), st));
      call(tuned, y_t.get());
      CUDA_CHECK(cudaStreamSynchronize(st));
      const auto ref = download(y_ref.get(), n, s.f32);
      const auto eager = download(y_t.get(), n, s.f32);
      const double e = rel_l2(eager, ref);
      EXPECT_LE(e, 1e-2);
      // The same call captured in a graph and replayed.
      CUDA_CHECK(cudaMemsetAsync(y_t.get(), 0xFF, y_t.bytes(), st));
      CUDA_CHECK(cudaStreamSynchronize(st));
      cudaGraph_t g = nullptr;
      CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
      call(tuned, y_t.get());
      CUDA_CHECK(cudaStreamEndCapture(st, &g));
      cudaGraphExec_t ex = nullptr;
      CUDA_CHECK(cudaGraphInstantiate(&ex, g, 0));
      CUDA_CHECK(cudaGraphLaunch(ex, st));
      CUDA_CHECK(cudaStreamSynchronize(st));
      const auto graph = download(y_t.get(), n, s.f32);
      EXPECT_LE(rel_l2(graph, ref), 1e-2);
      EXPECT_LE(rel_l2(graph, eager), 1e-3);
      cudaGraphExecDestroy(ex);
      cudaGraphDestroy(g);
    }
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace strata::cuda
