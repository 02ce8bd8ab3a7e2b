// The CUDA FP8 (W8A8) path (issue 20, cuda/fp8.h) against the CPU FP8 oracle
// (runtime/cpu/fp8_matmul.h), which has the same rounding:
// - per-row quantization of bf16 rows: codes and scales bit-identical to the oracle's;
// - RMSNorm and SwiGLU quantizing their fp32 outputs: each code within one e4m3 step of the
//   oracle's quantization of the fp64-computed values (the GPU's fp32 values differ from them
//   in the last bits, which moves a value across a rounding boundary now and then);
// - the GEMMs (skinny kernel, cuBLASLt outer-vector scales, the scalar-scaled fallback) against
//   the oracle's exactly summed products. Bound, derived: the oracle rounds once; the GPU adds
//   fp32 sums in its own order (≤ K · 2^-24 · Σ|x̂ŵ| for fp32 accumulation, the tensor cores'
//   FP8 partial sums promoted to fp32) and one bf16 rounding (≤ 2^-8 |y|). Tested:
//   |gpu - ref| ≤ 2^-8 |ref| + 2^-10 · xs · ws · Σ|x̂ŵ| per element, and the measured worst
//   accumulation error as a fraction of xs · ws · Σ|x̂ŵ| is printed;
// - the whole model: CUDA fp8 vs CPU fp8 teacher-forced logits on make_model checkpoints
//   (tiny and 4 layers of the Llama-3-8B width). Bound, derived: the GPU's activations differ
//   from the CPU's by its bf16 error e0 (GPU bf16 vs CPU fp32), and where a difference crosses an
//   e4m3 rounding boundary a code moves by a whole step: the share of moved codes grows with the
//   difference, their noise with its square root. So a small deterministic perturbation of the
//   model (another rms_norm_eps, as gpu_sparse_model_test does) of size e_eps on the GPU in bf16
//   gives d_eps in fp8, and the GPU-vs-oracle difference is bounded by
//   d <= 2 * max over eps of d_eps * max(sqrt(e0 / e_eps), e0 / e_eps) (square-root scaling for
//   the moved codes, linear for what propagates; the larger of the two either side of e_eps =
//   e0), and at least 3e-2; greedy agreement with the oracle >= 85 % (these random models have
//   near-ties everywhere);
// - pre-quantized compressed-tensors checkpoints (written by tests/runtime/model/
//   compressed_tensors_writer.h): channel scales with dynamic activations equal the load-time
//   quantization of the bf16 original bitwise (same codes, same scales); per-tensor scales with
//   static input scales against the CPU backend on the same checkpoint within twice the dynamic
//   checkpoint's GPU-vs-oracle difference (the same rounding-boundary effect, another scale
//   source); weight-only (dequantized to bf16 here, fp32 on the CPU) within the bf16 bound 3e-2;
// - `random:` FP8 weights built on the device equal the checkpoint's quantized at load
//   (bitwise logits), and graph replay equals eager bitwise in fp8 (decode splits fixed: eager
//   and full-cache graphs pick them differently, docs/cuda-backend.md "CUDA graphs").
#include "runtime/fp8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "cuda/cuda_backend.h"
#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "cuda/testing/backend_probe.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/fp8_matmul.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "runtime/teacher_forcing.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/runtime/model/compressed_tensors_writer.h"

namespace strata::gputest {
namespace {

using cuda::CudaBackend;

std::vector<float> random_f32(std::size_t n, double std, std::mt19937_64& rng) {
  std::normal_distribution<double> d(0.0, std);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(d(rng));
  return v;
}

// One e4m3 step apart (or equal): |index(a) - index(b)| <= 1 on the ordered code line.
bool within_one_step(std::uint8_t a, std::uint8_t b) {
  const auto ord = [](std::uint8_t c) {
    const int m = c & 0x7f;
    return (c & 0x80) ? -m : m;
  };
  return std::abs(ord(a) - ord(b)) <= 1;
}

// cols 4096: the vectorized kernel (registers, one pass); 14336 and 100: the two-pass one.
void quantize_rows_vs_oracle(int cols) {
  std::mt19937_64 rng(3 + static_cast<unsigned>(cols));
  const int rows = 37;
  auto x = random_bf16(static_cast<std::size_t>(rows) * cols, 0.7, rng);
  for (int c = 0; c < cols; ++c) x.bits[static_cast<std::size_t>(5) * cols + c] = 0;  // zero row
  for (int c = 0; c < cols; c += 7)  // a row with a wide range (subnormal codes appear)
    x.bits[static_cast<std::size_t>(9) * cols + c] = float_to_bf16(c % 2 ? 3e4f : -1e-3f);
  std::vector<float> xf(x.bits.size());
  for (std::size_t i = 0; i < xf.size(); ++i) xf[i] = bf16_to_float(x.bits[i]);
  const cpu::Fp8Rows want = cpu::quantize_rows_e4m3(xf.data(), rows, cols);
  auto dx = to_device_bf16(x.bits);
  DeviceArray<std::uint8_t> codes(static_cast<std::size_t>(rows) * cols);
  DeviceArray<float> scale(static_cast<std::size_t>(rows));
  cuda::launch_quantize_rows(dx.get(), cols, rows, cols, {codes.get(), scale.get()}, nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got_c = to_host(codes);
  const auto got_s = to_host(scale);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got_c.size(); ++i) bad += got_c[i] != want.codes[i];
  EXPECT_EQ(bad, 0u) << "codes differing from the oracle (cols " << cols << ")";
  for (int r = 0; r < rows; ++r)
    EXPECT_EQ(got_s[static_cast<std::size_t>(r)], want.scale[static_cast<std::size_t>(r)])
        << "row " << r;
  EXPECT_EQ(got_s[5], 1.0f) << "an all-zero row has scale 1";
  // Static scale: every row with it, codes = e4m3(x / s) saturating (the CPU's static rule).
  const float st = 0.01f;
  const cpu::Fp8Rows want_st = cpu::quantize_rows_e4m3_static(xf.data(), rows, cols, st);
  cuda::launch_quantize_rows(dx.get(), cols, rows, cols, {codes.get(), scale.get()}, nullptr, st);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto st_c = to_host(codes);
  const auto st_s = to_host(scale);
  bad = 0;
  for (std::size_t i = 0; i < st_c.size(); ++i) bad += st_c[i] != want_st.codes[i];
  EXPECT_EQ(bad, 0u) << "static-scale codes differing from the oracle (cols " << cols << ")";
  EXPECT_EQ(st_s[0], st);
}

TEST(GpuFp8, QuantizeRowsEqualsOracle) {
  REQUIRE_GPU();
  for (int cols : {4096, 14336, 100}) quantize_rows_vs_oracle(cols);
}

TEST(GpuFp8, RmsNormAndSwigluQuantizeTheirOutputs) {
  REQUIRE_GPU();
  std::mt19937_64 rng(4);
  const int T = 19, H = 4096, I = 14336;
  // RMSNorm: resid fp32, weight bf16; reference in fp64, quantized by the oracle.
  const auto resid = random_f32(static_cast<std::size_t>(T) * H, 1.3, rng);
  const auto wt = random_bf16(static_cast<std::size_t>(H), 0.2, rng);
  std::vector<float> ref(resid.size());
  for (int t = 0; t < T; ++t) {
    double ss = 0;
    for (int i = 0; i < H; ++i) ss += double(resid[t * H + i]) * resid[t * H + i];
    const double inv = 1.0 / std::sqrt(ss / H + 1e-5);
    for (int i = 0; i < H; ++i)
      ref[static_cast<std::size_t>(t) * H + i] =
          static_cast<float>(resid[t * H + i] * inv * wt.val[i]);
  }
  auto d_resid = to_device(resid);
  auto d_w = to_device_bf16(wt.bits);
  DeviceArray<std::uint8_t> codes(static_cast<std::size_t>(T) * I);
  DeviceArray<float> scale(static_cast<std::size_t>(T));
  cuda::launch_rmsnorm({.resid = d_resid.get(),
                        .delta = nullptr,
                        .weight = d_w.get(),
                        .out = nullptr,
                        .rows = nullptr,
                        .num_rows = T,
                        .hidden = H,
                        .eps = 1e-5f,
                        .out8 = {codes.get(), scale.get()}},
                       nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  auto check = [&](const std::vector<float>& want_f, int cols, const char* what) {
    const cpu::Fp8Rows want = cpu::quantize_rows_e4m3(want_f.data(), T, cols);
    const auto gc = to_host(codes);
    const auto gs = to_host(scale);
    std::size_t moved = 0, far = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(T) * cols; ++i) {
      moved += gc[i] != want.codes[i];
      far += !within_one_step(gc[i], want.codes[i]);
    }
    for (int t = 0; t < T; ++t)
      EXPECT_NEAR(gs[static_cast<std::size_t>(t)], want.scale[static_cast<std::size_t>(t)],
                  1e-5 * want.scale[static_cast<std::size_t>(t)])
          << what << " row " << t;
    EXPECT_EQ(far, 0u) << what << ": codes more than one step from the oracle's";
    const double frac = static_cast<double>(moved) / (static_cast<double>(T) * cols);
    EXPECT_LT(frac, 0.01) << what << ": share of codes one step off";
    figure(std::string("fp8_") + what + "_codes_one_step_off", frac);
  };
  check(ref, H, "rmsnorm");
  // SwiGLU: gu bf16; reference silu(g) * u in fp64.
  const auto gu = random_bf16(static_cast<std::size_t>(T) * 2 * I, 1.0, rng);
  std::vector<float> act(static_cast<std::size_t>(T) * I);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < I; ++j) {
      const double g = gu.val[static_cast<std::size_t>(t) * 2 * I + j],
                   u = gu.val[static_cast<std::size_t>(t) * 2 * I + I + j];
      act[static_cast<std::size_t>(t) * I + j] = static_cast<float>(g / (1 + std::exp(-g)) * u);
    }
  auto d_gu = to_device_bf16(gu.bits);
  cuda::launch_swiglu({.gu = d_gu.get(),
                       .out = nullptr,
                       .num_tokens = T,
                       .inter = I,
                       .out8 = {codes.get(), scale.get()}},
                      nullptr);
  CUDA_CHECK(cudaDeviceSynchronize());
  check(act, I, "swiglu");
}

// One GEMM shape on every path against the oracle.
void gemm_vs_oracle(int T, int N, int K, cuda::Gemm& gemm, bool skinny, bool fallback,
                    double* worst_acc) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(T * 7919 + N * 31 + K));
  const auto xf = random_f32(static_cast<std::size_t>(T) * K, 1.0, rng);
  auto wf = random_f32(static_cast<std::size_t>(N) * K, 0.02, rng);
  for (int k = 0; k < K; ++k)
    wf[static_cast<std::size_t>(N / 2) * K + k] *= 40.0f;  // one loud channel
  cpu::ThreadPool pool(0);
  const cpu::Fp8Rows xq = cpu::quantize_rows_e4m3(xf.data(), T, K, &pool);
  const cpu::Fp8Rows wq = cpu::quantize_rows_e4m3(wf.data(), N, K, &pool);
  std::vector<float> ref(static_cast<std::size_t>(T) * N);
  cpu::matmul_e4m3(pool, xq, wq, ref.data());
  // Σ|x̂ŵ| per element: the oracle on the codes' magnitudes.
  cpu::Fp8Rows xa = xq, wa = wq;
  for (auto& c : xa.codes) c &= 0x7f;
  for (auto& c : wa.codes) c &= 0x7f;
  std::fill(xa.scale.begin(), xa.scale.end(), 1.0f);
  std::fill(wa.scale.begin(), wa.scale.end(), 1.0f);
  std::vector<float> mag(ref.size());
  cpu::matmul_e4m3(pool, xa, wa, mag.data());

  auto dxc = to_device(xq.codes);
  auto dxs = to_device(xq.scale);
  auto dwc = to_device(wq.codes);
  auto dws = to_device(wq.scale);
  DeviceArray<bf16> y(static_cast<std::size_t>(T) * N);
  poison(y);
  gemm.set_skinny(skinny);
  gemm.set_fp8_fallback(fallback);
  gemm.linear_fp8({dxc.get(), dxs.get()}, {dwc.get(), dws.get()}, y.get(), T, N, K);
  CUDA_CHECK(cudaDeviceSynchronize());
  const auto got = to_host_bf16(y.get(), y.size());
  const std::string tag = "T=" + std::to_string(T) + " N=" + std::to_string(N) +
                          " K=" + std::to_string(K) + (skinny ? " skinny" : "") +
                          (fallback ? " fallback" : "");
  std::size_t bad = 0;
  for (int t = 0; t < T; ++t)
    for (int n = 0; n < N; ++n) {
      const std::size_t i = static_cast<std::size_t>(t) * N + n;
      const double s =
          double(xq.scale[static_cast<std::size_t>(t)]) * wq.scale[static_cast<std::size_t>(n)];
      const double err = std::fabs(got[i] - ref[i]);
      const double acc = std::max(0.0, err - std::ldexp(std::fabs(ref[i]), -8));
      *worst_acc = std::max(*worst_acc, acc / (s * mag[i] + 1e-30));
      if (!(err <= std::ldexp(std::fabs(ref[i]), -8) + std::ldexp(s * mag[i], -10))) {
        if (bad++ < 5)
          ADD_FAILURE() << tag << ": y[" << t << "][" << n << "] = " << got[i] << ", oracle "
                        << ref[i] << " (scale " << s << ", sum |x w| " << mag[i] << ")";
      }
    }
  EXPECT_EQ(bad, 0u) << tag;
  gemm.set_skinny(true);
  gemm.set_fp8_fallback(false);
}

TEST(GpuFp8, GemmsMatchOracle) {
  REQUIRE_GPU();
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreate(&s));
  {
    cuda::Gemm gemm(s);
    gemm.enable_fp8();
    double worst = 0;
    gemm.set_fp8_path(cuda::Gemm::Fp8Path::kCores);  // the CUDA-core kernel
    for (int T : {1, 2, 3, 4}) gemm_vs_oracle(T, 1000, 4096, gemm, true, false, &worst);
    figure("fp8_gemm_skinny_worst_acc_err", worst);
    worst = 0;
    for (auto path : {cuda::Gemm::Fp8Path::kMma, cuda::Gemm::Fp8Path::kMmaWide}) {
      gemm.set_fp8_path(path);  // tensor cores, both shapes (N = 1000: a partial block)
      for (int T : {1, 2, 3, 5, 8, 9, 16, 33, 64})
        gemm_vs_oracle(T, 1000, 4096, gemm, true, false, &worst);
      gemm_vs_oracle(64, 4096, 14336, gemm, true, false, &worst);
      gemm_vs_oracle(7, 6144, 4096, gemm, true, false, &worst);
      // K = 384: three wide stages; the narrow shape (256-byte stages) falls back to cuBLASLt.
      gemm_vs_oracle(40, 200, 384, gemm, true, false, &worst);
    }
    figure("fp8_gemm_small_mma_worst_acc_err", worst);
    // The split-K-in-block kernel, with and without programmatic dependent launch (N = 1000: a
    // partial block; K = 14336: 56 stages over 8 warps, 7 each; T = 33 and 64 fall back to the
    // small-row kernel, K = 384 to cuBLASLt).
    for (const bool pdl : {true, false}) {
      worst = 0;
      gemm.set_fp8_pdl(pdl);
      gemm.set_fp8_path(cuda::Gemm::Fp8Path::kWarpK);
      for (int T : {1, 2, 3, 5, 8, 9, 16, 25, 32, 33, 64})
        gemm_vs_oracle(T, 1000, 4096, gemm, true, false, &worst);
      gemm_vs_oracle(32, 4096, 14336, gemm, true, false, &worst);
      gemm_vs_oracle(64, 4096, 14336, gemm, true, false, &worst);
      gemm_vs_oracle(7, 6144, 4096, gemm, true, false, &worst);
      gemm_vs_oracle(3, 200, 256, gemm, true, false, &worst);  // one stage: 7 warps idle
      gemm_vs_oracle(40, 200, 384, gemm, true, false, &worst);
      figure(pdl ? "fp8_gemm_warpk_worst_acc_err" : "fp8_gemm_warpk_nopdl_worst_acc_err", worst);
    }
    gemm.set_fp8_pdl(true);
    gemm.set_fp8_path(cuda::Gemm::Fp8Path::kAuto);
    worst = 0;
    for (int T : {1, 4, 5, 16, 64, 256, 300})
      gemm_vs_oracle(T, 1024, 4096, gemm, false, false, &worst);
    gemm_vs_oracle(64, 4096, 14336, gemm, false, false, &worst);  // the down projection's K
    std::printf("cuBLASLt outer-vector scales: %s\n", gemm.fp8_outer_vec() ? "yes" : "no");
    figure("fp8_gemm_lt_outer_vec", gemm.fp8_outer_vec() ? 1 : 0);
    figure("fp8_gemm_lt_worst_acc_err", worst);
    worst = 0;
    for (int T : {5, 64, 300}) gemm_vs_oracle(T, 1024, 4096, gemm, false, true, &worst);
    figure("fp8_gemm_fallback_worst_acc_err", worst);
  }
  CUDA_CHECK(cudaStreamDestroy(s));
}

// The split-K-in-block kernel launched with programmatic dependent launch: a chain of GEMMs on
// one stream writing the same y (each may start while the previous drains; none may write y
// before the previous has finished) ends with the last GEMM's result, bitwise equal to it alone
// and to the kernel without PDL; the chain captured in a graph replays to the same bits.
TEST(GpuFp8, WarpKChainWithPdlEqualsEagerAndGraph) {
  REQUIRE_GPU();
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int T = 8, N = 4096, K = 4096, kChain = 6;
  std::mt19937_64 rng(77);
  const auto xf = random_f32(static_cast<std::size_t>(T) * K, 1.0, rng);
  cpu::ThreadPool pool(0);
  const cpu::Fp8Rows xq = cpu::quantize_rows_e4m3(xf.data(), T, K, &pool);
  auto dxc = to_device(xq.codes);
  auto dxs = to_device(xq.scale);
  std::vector<DeviceArray<std::uint8_t>> wc;
  std::vector<DeviceArray<float>> ws;
  for (int i = 0; i < kChain; ++i) {
    const auto wf = random_f32(static_cast<std::size_t>(N) * K, 0.02 * (i + 1), rng);
    const cpu::Fp8Rows wq = cpu::quantize_rows_e4m3(wf.data(), N, K, &pool);
    wc.push_back(to_device(wq.codes));
    ws.push_back(to_device(wq.scale));
  }
  const std::size_t n = static_cast<std::size_t>(T) * N;
  DeviceArray<bf16> y(n), alone(n), plain(n), graphed(n);
  cuda::Gemm g(s);
  g.enable_fp8();
  g.set_fp8_path(cuda::Gemm::Fp8Path::kWarpK);
  const auto chain = [&](bf16* out) {
    for (int i = 0; i < kChain; ++i)
      g.linear_fp8({dxc.get(), dxs.get()}, {wc[i].get(), ws[i].get()}, out, T, N, K);
  };
  const auto host = [&](const DeviceArray<bf16>& d) {
    std::vector<std::uint16_t> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d.get(), n * 2, cudaMemcpyDeviceToHost));
    return h;
  };
  g.set_fp8_pdl(false);
  g.linear_fp8({dxc.get(), dxs.get()}, {wc[kChain - 1].get(), ws[kChain - 1].get()}, alone.get(), T,
               N, K);
  chain(plain.get());
  g.set_fp8_pdl(true);
  CUDA_CHECK(cudaStreamSynchronize(s));
  const auto want = host(alone);
  EXPECT_EQ(host(plain), want) << "the chain without PDL";
  for (int rep = 0; rep < 20; ++rep) {
    poison(y);
    CUDA_CHECK(cudaDeviceSynchronize());
    chain(y.get());
    CUDA_CHECK(cudaStreamSynchronize(s));
    ASSERT_EQ(host(y), want) << "PDL chain, repeat " << rep;
  }
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  chain(graphed.get());
  CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t ex = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&ex, graph, 0));
  for (int rep = 0; rep < 5; ++rep) {
    poison(graphed);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGraphLaunch(ex, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_EQ(host(graphed), want) << "graph replay " << rep;
  }
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

std::string model_dir(const std::string& preset, int layers) {
  return cached_model_dir("fp8", preset, layers, 5);
}

Config cuda_config(const std::string& path, Quantization q, bool graphs = true) {
  Config c;
  c.model.path = path;
  c.model.seed = 5;
  c.model.quantization = q;
  c.model.max_model_len = 1024;
  c.cache.kv_bytes = 256ull << 20;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 256;
  c.backend.cuda_graphs = graphs;
  return c;
}

double argmax_agreement(const std::vector<float>& a, const std::vector<float>& b, int V) {
  std::size_t same = 0, n = a.size() / V;
  for (std::size_t r = 0; r < n; ++r) {
    const auto ia =
        std::max_element(a.begin() + r * V, a.begin() + (r + 1) * V) - (a.begin() + r * V);
    const auto ib =
        std::max_element(b.begin() + r * V, b.begin() + (r + 1) * V) - (b.begin() + r * V);
    same += ia == ib;
  }
  return n ? static_cast<double>(same) / n : 0.0;
}

void model_vs_oracle(const std::string& preset, int layers, int N, int P, const std::string& tag,
                     const std::vector<double>& eps_list) {
  const std::string dir = model_dir(preset, layers);
  auto weights = std::shared_ptr<const ModelWeights>(ModelWeights::load(dir));
  CpuBackendOptions co;
  co.kv_bytes = 1ull << 30;
  auto cpu32 = make_cpu_backend(weights, co);
  co.quantization = Quantization::kFp8;
  auto cpu8 = make_cpu_backend(weights, co);
  CudaBackend g16(cuda_config(dir, Quantization::kNone), 0);
  CudaBackend g8(cuda_config(dir, Quantization::kFp8), 0);
  const int V = g8.model().vocab_size;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(N));
  for (int i = 0; i < N; ++i) ids[static_cast<std::size_t>(i)] = (i * 53 + 7) % V;
  const SparsityProfile off;
  const auto c32 = teacher_forced_logits(*cpu32, ids, off, P);
  const auto c8 = teacher_forced_logits(*cpu8, ids, off, P);
  const auto l16 = teacher_forced_logits(g16, ids, off, P);
  const auto l8 = teacher_forced_logits(g8, ids, off, P);
  const double e0 = worst_rel_l2(l16, c32, V, tag + " bf16 vs fp32"),
               q = worst_rel_l2(c8, c32, V, tag + " cpu fp8 vs fp32"),
               d = worst_rel_l2(l8, c8, V, tag + " fp8 vs oracle"),
               d16 = worst_rel_l2(l8, l16, V, tag + " fp8 vs bf16");
  double bound = 3e-2;
  for (double eps : eps_list) {
    const std::string pd = perturbed_dir(dir, eps);
    CudaBackend p16(cuda_config(pd, Quantization::kNone), 0);
    CudaBackend p8(cuda_config(pd, Quantization::kFp8), 0);
    const double e_eps =
        worst_rel_l2(teacher_forced_logits(p16, ids, off, P), l16, V, tag + " eps bf16");
    const double d_eps =
        worst_rel_l2(teacher_forced_logits(p8, ids, off, P), l8, V, tag + " eps fp8");
    const double r = e0 / std::max(e_eps, 1e-12);
    bound = std::max(bound, 2.0 * d_eps * std::max(std::sqrt(r), r));
    std::printf("%s: rms_norm_eps %g: bf16 moved %.4f, fp8 moved %.4f\n", tag.c_str(), eps, e_eps,
                d_eps);
  }
  const double agree = argmax_agreement(l8, c8, V);
  std::printf(
      "%s: bf16 GPU vs fp32 CPU %.4f, CPU fp8 vs fp32 %.4f, GPU fp8 vs CPU fp8 %.4f "
      "(bound %.4f), GPU fp8 vs GPU bf16 %.4f, greedy agreement with the oracle %.3f\n",
      tag.c_str(), e0, q, d, bound, d16, agree);
  figure("fp8_model_" + tag + "_vs_oracle_rel_l2", d);
  figure("fp8_model_" + tag + "_vs_oracle_bound", bound);
  figure("fp8_model_" + tag + "_quantization_rel_l2", q);
  figure("fp8_model_" + tag + "_vs_bf16_rel_l2", d16);
  figure("fp8_model_" + tag + "_greedy_agreement", agree);
  EXPECT_LE(d, bound) << tag;
  EXPECT_GE(agree, 0.85) << tag;
  EXPECT_GT(q, e0) << tag << ": quantization must change the logits more than bf16 does";
}

TEST(GpuFp8, TinyModelMatchesOracle) {
  REQUIRE_GPU();
  model_vs_oracle("tiny", 0, 96, 64, "tiny", {3e-3, 6e-3, 1.2e-2});
}

TEST(GpuFp8, Llama8BWidth4LayersMatchesOracle) {
  REQUIRE_GPU();
  model_vs_oracle("llama3-8b", 4, 48, 32, "llama8b_4layers", {5e-3, 1e-2});
}

TEST(GpuFp8, PrequantizedCheckpoints) {
  REQUIRE_GPU();
  const std::string src = model_dir("tiny", 0);
  const std::string base = (std::filesystem::temp_directory_path() / "strata_fp8_ct_").string();
  test::CtOptions dyn;  // channel scales (F32), dynamic per-token activations (FP8-dynamic)
  test::write_ct_checkpoint(src, base + "dynamic", dyn);
  test::CtOptions stat;  // per-tensor scales, static input scales (FP8)
  stat.weights = test::CtWeights::kTensor;
  stat.activations = test::CtActivations::kStaticTensor;
  for (const char* p :
       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    stat.input_scales[p] = 16.0f / 448;
  test::write_ct_checkpoint(src, base + "static", stat);
  test::CtOptions wo;  // weight-only
  wo.activations = test::CtActivations::kNone;
  test::write_ct_checkpoint(src, base + "weight_only", wo);

  std::vector<std::int32_t> ids(72);
  const SparsityProfile off;
  auto logits = [&](Backend& be) {
    const int V = be.model().vocab_size;
    for (int i = 0; i < 72; ++i) ids[static_cast<std::size_t>(i)] = (i * 41 + 9) % V;
    return teacher_forced_logits(be, ids, off, 48);
  };
  auto cpu = [&](const std::string& dir) {
    CpuBackendOptions co;
    co.kv_bytes = 1ull << 30;
    return make_cpu_backend(std::shared_ptr<const ModelWeights>(ModelWeights::load(dir)), co);
  };
  CudaBackend load_time(cuda_config(src, Quantization::kFp8), 0);
  // model.quantization none: a pre-quantized checkpoint runs in FP8 all the same.
  CudaBackend g_dyn(cuda_config(base + "dynamic", Quantization::kNone), 0);
  const auto a = logits(load_time), b = logits(g_dyn);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
      << "channel-dynamic checkpoint differs from load-time quantization of its bf16 original";
  const int V = g_dyn.model().vocab_size;
  const double d_dyn = worst_rel_l2(b, logits(*cpu(base + "dynamic")), V, "dynamic");
  CudaBackend g_stat(cuda_config(base + "static", Quantization::kNone), 0);
  const auto ls = logits(g_stat), cs = logits(*cpu(base + "static"));
  const double d_stat = worst_rel_l2(ls, cs, V, "static");
  const double agree = argmax_agreement(ls, cs, V);
  EXPECT_LE(d_stat, std::max(3e-2, 2.0 * d_dyn)) << "static input scales vs the CPU backend";
  EXPECT_GE(agree, 0.85);
  EXPECT_GT(worst_rel_l2(ls, b, V, "static vs dynamic"), 1e-3)
      << "static scales must change the result";
  CudaBackend g_wo(cuda_config(base + "weight_only", Quantization::kFp8), 0);
  const double d_wo =
      worst_rel_l2(logits(g_wo), logits(*cpu(base + "weight_only")), V, "weight-only");
  EXPECT_LE(d_wo, 3e-2) << "weight-only vs the CPU backend";
  std::printf(
      "pre-quantized: dynamic vs CPU %.4f, static vs CPU %.4f (agreement %.3f), "
      "weight-only vs CPU %.4f\n",
      d_dyn, d_stat, agree, d_wo);
  figure("fp8_ct_dynamic_vs_cpu_rel_l2", d_dyn);
  figure("fp8_ct_static_vs_cpu_rel_l2", d_stat);
  figure("fp8_ct_weight_only_vs_cpu_rel_l2", d_wo);
}

TEST(GpuFp8, RandomOnDeviceEqualsCheckpointAndGraphsEqualEager) {
  REQUIRE_GPU();
  const std::string dir = model_dir("tiny", 0);
  CudaBackend from_dir(cuda_config(dir, Quantization::kFp8), 0);
  CudaBackend on_device(cuda_config("random:tiny", Quantization::kFp8), 0);
  CudaBackend eager(cuda_config(dir, Quantization::kFp8, false), 0);
  for (CudaBackend* be : {&from_dir, &on_device, &eager})
    cuda::CudaBackendProbe(*be).set_decode_splits(1);
  EXPECT_EQ(from_dir.info().weight_bytes, on_device.info().weight_bytes);
  const int V = from_dir.model().vocab_size;
  std::vector<std::int32_t> ids(80);
  for (int i = 0; i < 80; ++i) ids[static_cast<std::size_t>(i)] = (i * 29 + 3) % V;
  const SparsityProfile off;
  const auto a = teacher_forced_logits(from_dir, ids, off, 40);
  const auto b = teacher_forced_logits(on_device, ids, off, 40);
  const auto c = teacher_forced_logits(eager, ids, off, 40);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
      << "random:tiny built on the device differs from its make_model checkpoint";
  ASSERT_EQ(a.size(), c.size());
  EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)))
      << "graph replay differs from eager in fp8";
}

}  // namespace
}  // namespace strata::gputest
