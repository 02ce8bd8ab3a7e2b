// gpu_bench gemm-decode (issue 18 item 3): the Hopper decode GEMM (cuda/gemm_decode.h) beside
// cuBLAS's default and the autotuned choice (Gemm::autotune, which has the decode kernel among its
// candidates) over the Llama-3-8B layer shapes at 1..256 rows, as % of the 4.27 TB/s copy
// ceiling with bytes = W + x + y (bf16 out). Per shape and rows, then one layer's four GEMMs.
// Timing: CUDA events around single calls after warm-up, median of the runs. Then the FP8 (e4m3)
// variant (launch_decode_gemm_fp8) beside Gemm::linear_fp8's untuned rule per shape and rows,
// bytes = the e4m3 W + its fp32 scales + x codes + y (bf16).
#include "tools/gpu/bench_gemm_decode.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cuda/cuda_check.h"
#include "cuda/device_buffer.h"
#include "cuda/fp8.h"
#include "cuda/gemm.h"
#include "cuda/gemm_decode.h"
#include "cuda/kernels.h"

namespace strata::bench {
namespace {

using bf16 = __nv_bfloat16;
constexpr double kCopyBw = 4.27e12;

void figure(const std::string& name, double v) {
  std::printf("FIGURE %s %.6g\n", name.c_str(), v);
  std::fflush(stdout);
}

double median_us(cudaStream_t s, const std::function<void()>& f, int warm, int runs) {
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warm; ++i) f();
  std::vector<float> t;
  for (int i = 0; i < runs; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return 1e3 * t[t.size() / 2];
}

}  // namespace

void bench_gemm_decode() {
  const int H = 4096, I = 14336;
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {{"qkv", 6144, H}, {"o", H, H}, {"gate_up", 2 * I, H}, {"down", H, I}};
  const std::vector<int> rows = {1, 8, 16, 64, 128, 256};
  cudaStream_t s = nullptr;
  int dev = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  std::vector<cuda::DeviceArray<bf16>> ws;
  std::vector<cuda::GemmShape> gs;
  for (const auto& sh : shapes) {
    ws.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
    cuda::launch_random_fill(
        {ws.back().get(), static_cast<long long>(ws.back().size()), 6, 0x77ull, 1.0f, 0.0f}, s);
    gs.push_back({sh.name, sh.N, sh.K, false, ws.back().get()});
  }
  cuda::DeviceArray<bf16> x(static_cast<std::size_t>(256) * I),
      y(static_cast<std::size_t>(256) * 2 * I);
  cuda::launch_random_fill({x.get(), static_cast<long long>(x.size()), 5, 0x78ull, 1.0f, 0.0f}, s);
  cuda::DeviceArray<float> partial(cuda::decode_gemm_partial_floats(sms));
  cuda::DeviceArray<unsigned> counters(cuda::kDecodeGemmMaxTiles);
  CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
  const cuda::DecodeGemmWorkspace dws{partial.get(), counters.get()};

  cuda::Gemm lib(s), tuned(s);
  lib.set_skinny(false);
  lib.set_decode(cuda::Gemm::DecodePath::kOff);
  const auto res = tuned.autotune(gs, rows, 10000.0);
  std::map<std::pair<std::string, int>, std::string> chosen;
  for (const auto& r : res) chosen[{r.name, r.T}] = r.chosen;

  std::map<int, double> layer_new, layer_lib, layer_tuned, layer_bytes;
  constexpr int kWarm = 3, kRuns = 20;
  for (const auto& sh : shapes) {
    const cuda::DeviceArray<bf16>& w = ws[static_cast<std::size_t>(&sh - shapes)];
    for (const int T : rows) {
      const double bytes = 2.0 * sh.N * sh.K + 2.0 * T * sh.K + 2.0 * T * sh.N;
      const double us_new = cuda::decode_gemm_applies(x.get(), w.get(), T, sh.N, sh.K)
                                ? median_us(
                                      s,
                                      [&] {
                                        cuda::launch_decode_gemm(x.get(), w.get(), y.get(), false,
                                                                 T, sh.N, sh.K, dws, sms, s);
                                      },
                                      kWarm, kRuns)
                                : 0.0;
      const double us_lib = median_us(
          s, [&] { lib.linear(x.get(), w.get(), y.get(), T, sh.N, sh.K); }, kWarm, kRuns);
      const double us_tuned = median_us(
          s, [&] { tuned.linear(x.get(), w.get(), y.get(), T, sh.N, sh.K); }, kWarm, kRuns);
      const auto pct = [&](double us) {
        return us > 0 ? 100.0 * bytes / (us * 1e-6) / kCopyBw : 0;
      };
      std::printf(
          "%-8s N=%-6d K=%-6d T=%-4d  wgmma %7.1f us %5.1f%%  cuBLAS %7.1f us %5.1f%%  autotuned "
          "%7.1f us %5.1f%% (%s)\n",
          sh.name, sh.N, sh.K, T, us_new, pct(us_new), us_lib, pct(us_lib), us_tuned, pct(us_tuned),
          chosen[{sh.name, T}].c_str());
      const std::string key =
          std::string("bench_gemm_decode_") + sh.name + "_t" + std::to_string(T);
      figure(key + "_wgmma_us", us_new);
      figure(key + "_wgmma_frac_copy_bw", pct(us_new) / 100);
      figure(key + "_cublas_us", us_lib);
      figure(key + "_cublas_frac_copy_bw", pct(us_lib) / 100);
      figure(key + "_tuned_us", us_tuned);
      figure(key + "_tuned_frac_copy_bw", pct(us_tuned) / 100);
      layer_new[T] += us_new, layer_lib[T] += us_lib, layer_tuned[T] += us_tuned;
      layer_bytes[T] += bytes;
    }
  }
  for (const int T : rows) {
    const auto pct = [&](double us) { return 100.0 * layer_bytes[T] / (us * 1e-6) / kCopyBw; };
    std::printf(
        "layer (4 GEMMs) T=%-4d  wgmma %7.1f us %5.1f%%  cuBLAS %7.1f us %5.1f%%  autotuned %7.1f "
        "us %5.1f%%\n",
        T, layer_new[T], pct(layer_new[T]), layer_lib[T], pct(layer_lib[T]), layer_tuned[T],
        pct(layer_tuned[T]));
    const std::string key = "bench_gemm_decode_layer_t" + std::to_string(T);
    figure(key + "_wgmma_frac_copy_bw", pct(layer_new[T]) / 100);
    figure(key + "_cublas_frac_copy_bw", pct(layer_lib[T]) / 100);
    figure(key + "_tuned_frac_copy_bw", pct(layer_tuned[T]) / 100);
  }

  // FP8 (W8A8): the e4m3 variant beside the untuned rule (CUDA cores / mma.sync / cuBLASLt).
  std::vector<cuda::DeviceArray<std::uint8_t>> wc;
  std::vector<cuda::DeviceArray<float>> wsc;
  for (const auto& sh : shapes) {
    const auto& w = ws[static_cast<std::size_t>(&sh - shapes)];
    wc.emplace_back(static_cast<std::size_t>(sh.N) * sh.K);
    wsc.emplace_back(static_cast<std::size_t>(sh.N));
    cuda::launch_quantize_rows(w.get(), sh.K, sh.N, sh.K, {wc.back().get(), wsc.back().get()}, s);
  }
  cuda::DeviceArray<std::uint8_t> xc(static_cast<std::size_t>(256) * I);
  cuda::DeviceArray<float> xs(256);
  cuda::launch_quantize_rows(x.get(), I, 256, I, {xc.get(), xs.get()}, s);
  cuda::Gemm lib8(s);
  lib8.enable_fp8();
  CUDA_CHECK(cudaDeviceSynchronize());
  std::map<int, double> l8_new, l8_lib, l8_bytes, l8_wk;
  for (const auto& sh : shapes) {
    const std::size_t i8 = static_cast<std::size_t>(&sh - shapes);
    for (const int T : rows) {
      const double bytes = 1.0 * sh.N * sh.K + 4.0 * sh.N + 1.0 * T * sh.K + 2.0 * T * sh.N;
      const double us_new =
          cuda::decode_gemm_fp8_applies(xc.get(), wc[i8].get(), T, sh.N, sh.K)
              ? median_us(
                    s,
                    [&] {
                      cuda::launch_decode_gemm_fp8(xc.get(), xs.get(), wc[i8].get(), wsc[i8].get(),
                                                   y.get(), T, sh.N, sh.K, dws, sms, s);
                    },
                    kWarm, kRuns)
              : 0.0;
      const double us_lib = median_us(
          s,
          [&] {
            lib8.linear_fp8({xc.get(), xs.get()}, {wc[i8].get(), wsc[i8].get()}, y.get(), T, sh.N,
                            sh.K);
          },
          kWarm, kRuns);
      // The split-K-in-block kernel (kWarpK, 1..64 rows), with programmatic dependent launch.
      double us_wk = 0.0;
      if (cuda::warpk_fp8_applies(xc.get(), wc[i8].get(), T, sh.N, sh.K)) {
        lib8.set_fp8_path(cuda::Gemm::Fp8Path::kWarpK);
        us_wk = median_us(
            s,
            [&] {
              lib8.linear_fp8({xc.get(), xs.get()}, {wc[i8].get(), wsc[i8].get()}, y.get(), T, sh.N,
                              sh.K);
            },
            kWarm, kRuns);
        lib8.set_fp8_path(cuda::Gemm::Fp8Path::kAuto);
      }
      const auto pct = [&](double us) {
        return us > 0 ? 100.0 * bytes / (us * 1e-6) / kCopyBw : 0;
      };
      std::printf(
          "fp8 %-8s N=%-6d K=%-6d T=%-4d  wgmma %7.1f us %5.1f%%  default %7.1f us %5.1f%%  "
          "warpk %7.1f us %5.1f%%\n",
          sh.name, sh.N, sh.K, T, us_new, pct(us_new), us_lib, pct(us_lib), us_wk, pct(us_wk));
      figure(std::string("bench_gemm_decode_fp8_") + sh.name + "_t" + std::to_string(T) +
                 "_warpk_frac_copy_bw",
             pct(us_wk) / 100);
      l8_wk[T] += us_wk;
      const std::string key =
          std::string("bench_gemm_decode_fp8_") + sh.name + "_t" + std::to_string(T);
      figure(key + "_wgmma_us", us_new);
      figure(key + "_wgmma_frac_copy_bw", pct(us_new) / 100);
      figure(key + "_default_us", us_lib);
      figure(key + "_default_frac_copy_bw", pct(us_lib) / 100);
      l8_new[T] += us_new, l8_lib[T] += us_lib, l8_bytes[T] += bytes;
    }
  }
  for (const int T : rows) {
    const auto pct = [&](double us) { return 100.0 * l8_bytes[T] / (us * 1e-6) / kCopyBw; };
    std::printf(
        "fp8 layer (4 GEMMs) T=%-4d  wgmma %7.1f us %5.1f%%  default %7.1f us %5.1f%%  warpk %7.1f "
        "us %5.1f%%\n",
        T, l8_new[T], pct(l8_new[T]), l8_lib[T], pct(l8_lib[T]), l8_wk[T],
        l8_wk[T] > 0 ? pct(l8_wk[T]) : 0.0);
    const std::string key = "bench_gemm_decode_fp8_layer_t" + std::to_string(T);
    figure(key + "_wgmma_frac_copy_bw", pct(l8_new[T]) / 100);
    figure(key + "_default_frac_copy_bw", pct(l8_lib[T]) / 100);
  }
}

}  // namespace strata::bench
