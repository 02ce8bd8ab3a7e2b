// The Hopper decode GEMM (cuda/gemm_decode.h) over the four Llama-3-8B layer shapes at rows 1..256:
// against an fp64 CPU reference on every 11th weight row (and the last) of every tile, against
// cuBLAS on the whole output (no NaN anywhere: y is poisoned first), bf16 and fp32 output; bitwise
// repeatable; a graph replay equal to the eager call; other grids (other split-K patterns) within
// the same bound; Gemm's routes (forced, autotuned, fallback where it does not apply).
//
// Bounds. fp32 output: the kernel and the reference differ only by fp32 rounding of the K-term
// sums (wgmma accumulates in fp32; split pieces are added in fp32): rel L2 <= 2e-5 (the skinny
// kernel's measured order is 1e-6; 2e-5 leaves room for K = 14336 and 64 pieces). bf16 output adds
// one rounding to 8 bits of mantissa, RMS ~ 2^-9 / sqrt(3) relative: rel L2 <= 4e-3.
#include "cuda/gemm_decode.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/gemm.h"
#include "cuda/kernels.h"
#include "runtime/error.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::gputest {
namespace {

struct Shape {
  const char* name;
  int N, K;
};
constexpr Shape kShapes[] = {
    {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
constexpr int kRows[] = {1, 2, 3, 8, 17, 64, 100, 128, 256};
constexpr int kMaxT = 256;

// "<prefix><n><suffix>" (snprintf: GCC 12's -Wrestrict misfires on "literal" + std::string&&).
std::string named(const char* prefix, int n, const std::string& suffix = "") {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s%d%s", prefix, n, suffix.c_str());
  return buf;
}

void fill(bf16* p, std::size_t n, unsigned long long seed, float scale) {
  cuda::launch_random_fill({p, static_cast<long long>(n), seed, 0x5eedull, scale, 0.0f}, nullptr);
}

std::vector<double> download(const void* y, std::size_t n, bool f32) {
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

std::vector<unsigned char> raw(const DeviceArray<unsigned char>& d, std::size_t bytes) {
  std::vector<unsigned char> h(bytes);
  CUDA_CHECK(cudaMemcpy(h.data(), d.get(), bytes, cudaMemcpyDeviceToHost));
  return h;
}

// The kernel's own scratch (what Gemm allocates for it), counters zeroed; partials for
// `blocks_per_sm` x SMs blocks.
struct Scratch {
  int sms = 0;
  DeviceArray<float> partial;
  DeviceArray<unsigned> counters;
  explicit Scratch(int blocks_per_sm = 1) {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    partial = DeviceArray<float>(cuda::decode_gemm_partial_floats(blocks_per_sm * sms));
    counters = DeviceArray<unsigned>(cuda::kDecodeGemmMaxTiles);
    CUDA_CHECK(cudaMemset(counters.get(), 0, counters.bytes()));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  cuda::DecodeGemmWorkspace ws() { return {partial.get(), counters.get(), partial.size()}; }
};

void require_kernel() {
  DeviceArray<bf16> probe(64 * 64);
  std::string why;
  ASSERT_TRUE(cuda::decode_gemm_applies(probe.get(), probe.get(), 1, 64, 64, &why))
      << "the decode GEMM does not apply on this GPU: " << why;
}

TEST(GpuGemmDecode, MatchesFp64ReferenceEveryShapeAndRowCount) {
  REQUIRE_GPU();
  require_kernel();
  Scratch sc;
  cuda::Gemm lib(nullptr);  // cuBLAS's default, the whole-output check
  lib.set_skinny(false);
  lib.set_decode(cuda::Gemm::DecodePath::kOff);
  for (const Shape& s : kShapes) {
    DeviceArray<bf16> dx(static_cast<std::size_t>(kMaxT) * s.K),
        dw(static_cast<std::size_t>(s.N) * s.K);
    fill(dx.get(), dx.size(), 11, 1.0f);
    fill(dw.get(), dw.size(), 12, 1.0f / std::sqrt(static_cast<float>(s.K)));
    // fp64 reference on every 11th weight row and the last one, all 256 token rows.
    std::vector<int> rows_n;
    for (int n = 0; n < s.N; n += 11) rows_n.push_back(n);
    if (rows_n.back() != s.N - 1) rows_n.push_back(s.N - 1);
    const std::vector<double> xh = to_host_bf16(dx.get(), dx.size());
    std::vector<double> wh(rows_n.size() * static_cast<std::size_t>(s.K));
    for (std::size_t j = 0; j < rows_n.size(); ++j) {
      const auto r = to_host_bf16(dw.get() + static_cast<std::size_t>(rows_n[j]) * s.K, s.K);
      std::copy(r.begin(), r.end(), wh.begin() + static_cast<long>(j * s.K));
    }
    std::vector<double> ref(rows_n.size() * kMaxT);  // [j][t]
    parallel_for(static_cast<int>(rows_n.size()), [&](int j) {
      const double* w = wh.data() + static_cast<std::size_t>(j) * s.K;
      for (int t = 0; t < kMaxT; ++t) {
        const double* x = xh.data() + static_cast<std::size_t>(t) * s.K;
        double acc = 0;
        for (int k = 0; k < s.K; ++k) acc += x[k] * w[k];
        ref[static_cast<std::size_t>(j) * kMaxT + t] = acc;
      }
    });
    DeviceArray<unsigned char> y(static_cast<std::size_t>(kMaxT) * s.N * 4), y2(y.size()),
        yl(y.size());
    for (const bool f32 : {false, true})
      for (const int T : kRows) {
        char tag[96];
        std::snprintf(tag, sizeof tag, "%s_T%d_%s", s.name, T, f32 ? "f32" : "bf16");
        SCOPED_TRACE(tag);
        const std::size_t n = static_cast<std::size_t>(T) * s.N, bytes = n * (f32 ? 4 : 2);
        ASSERT_TRUE(cuda::decode_gemm_applies(dx.get(), dw.get(), T, s.N, s.K));
        poison(y);
        cuda::launch_decode_gemm(dx.get(), dw.get(), y.get(), f32, T, s.N, s.K, sc.ws(), sc.sms,
                                 nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<double> got = download(y.get(), n, f32);
        std::vector<double> g_s, r_s;
        for (std::size_t j = 0; j < rows_n.size(); ++j)
          for (int t = 0; t < T; ++t) {
            g_s.push_back(got[static_cast<std::size_t>(t) * s.N + rows_n[j]]);
            r_s.push_back(ref[j * kMaxT + t]);
          }
        const ErrStats e = compare(g_s, r_s);
        EXPECT_EQ(e.nan, 0u);
        EXPECT_LE(e.rel_l2, f32 ? 2e-5 : 4e-3);
        figure(std::string("gemm_decode_rel_l2_") + tag, e.rel_l2);
        // The whole output against cuBLAS (fp32 out): every tile and split written, no NaN.
        if (f32)
          lib.linear_f32out(dx.get(), dw.get(), reinterpret_cast<float*>(yl.get()), T, s.N, s.K);
        else
          lib.linear(dx.get(), dw.get(), reinterpret_cast<bf16*>(yl.get()), T, s.N, s.K);
        CUDA_CHECK(cudaDeviceSynchronize());
        const ErrStats el = compare(got, download(yl.get(), n, f32));
        EXPECT_EQ(el.nan, 0u);
        EXPECT_LE(el.rel_l2, f32 ? 2e-5 : 4e-3) << "vs cuBLAS over the whole output";
        // Bitwise repeatable (fixed split, fixed order of the pieces).
        cuda::launch_decode_gemm(dx.get(), dw.get(), y2.get(), f32, T, s.N, s.K, sc.ws(), sc.sms,
                                 nullptr);
        CUDA_CHECK(cudaDeviceSynchronize());
        EXPECT_EQ(raw(y, bytes), raw(y2, bytes)) << "two runs differ";
      }
  }
  // Every split tile's counter is back to zero.
  const std::vector<unsigned> c = to_host(sc.counters);
  EXPECT_EQ(std::count(c.begin(), c.end(), 0u), static_cast<long>(c.size()));
}

// Other grids split K differently (grid 1: no split at all; 20: blocks whose range holds pieces of
// three tiles, the middle one whole; 37: pieces of uneven length; 2 x SMs: more blocks than fit at
// once, so the fixup cannot assume co-residency): each against the fp64 reference within the
// first test's bound and against the default grid within fp32 summation order, bitwise repeatable,
// and a graph replay equals the eager call.
//
// The H200 failure of 2026-12-02 (grids 1 / 37 vs the default: rel L2 3.9e-3 at T = 1 only; graph
// replay != eager at T = 1 only) was this test's own race, not the kernel's: x and W were filled
// by launch_random_fill on the legacy default stream (nullptr) and the first call - the default
// grid's eager run at T = 1 - went to `st`, a cudaStreamNonBlocking stream, which does not wait
// for the legacy stream. It read W while the fill was still writing it (the freed buffers of the
// previous test held other random values of the same magnitude: a small rel error, no NaN).
// Everything later in the test ran after a cudaStreamSynchronize and agreed (grid 1 and grid 37
// agreed with each other to 1e-7; T = 17 / 64 / 256 passed). The kernel's fixup was made formally
// release/acquire at the same time (cuda/gemm_decode.cu). Here every host-side fill / memset is
// followed by a device synchronisation, each grid is also checked against the fp64 reference (so
// a wrong default grid cannot hide behind a right other grid), the partial slots are poisoned
// (NaN) before every launch (a piece read before it is written this launch shows as NaN), the
// counters are checked back at zero after every launch, and the eager call is repeated.
TEST(GpuGemmDecode, GridsAgreeAndGraphReplayEqualsEager) {
  REQUIRE_GPU();
  require_kernel();
  Scratch sc(2);
  const int N = 4096, K = 14336;  // down: 32 tiles x 224 k-tiles, every tile split 4+ ways
  DeviceArray<bf16> dx(static_cast<std::size_t>(kMaxT) * K), dw(static_cast<std::size_t>(N) * K);
  fill(dx.get(), dx.size(), 21, 1.0f);
  fill(dw.get(), dw.size(), 22, 0.01f);
  CUDA_CHECK(cudaDeviceSynchronize());  // the fills ran on the legacy stream; `st` does not wait
  // fp64 reference on every 7th weight row (and the last).
  std::vector<int> rows_n;
  for (int n = 0; n < N; n += 7) rows_n.push_back(n);
  rows_n.push_back(N - 1);
  const std::vector<double> xh = to_host_bf16(dx.get(), dx.size());
  std::vector<double> ref(rows_n.size() * kMaxT);
  parallel_for(static_cast<int>(rows_n.size()), [&](int j) {
    const std::vector<double> w =
        to_host_bf16(dw.get() + static_cast<std::size_t>(rows_n[j]) * K, K);
    for (int t = 0; t < kMaxT; ++t) {
      double acc = 0;
      for (int k = 0; k < K; ++k) acc += xh[static_cast<std::size_t>(t) * K + k] * w[k];
      ref[static_cast<std::size_t>(j) * kMaxT + t] = acc;
    }
  });
  cudaStream_t st = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const auto counters_zero = [&] {
    const std::vector<unsigned> c = to_host(sc.counters);
    return std::count(c.begin(), c.end(), 0u) == static_cast<long>(c.size());
  };
  // One launch on `st` after NaN-poisoning y and the partial slots (synchronised: poison's
  // cudaMemset is on the legacy stream).
  const auto run = [&](DeviceArray<unsigned char>& y, int T, int grid) {
    poison(y);
    poison(sc.partial);
    CUDA_CHECK(cudaDeviceSynchronize());
    cuda::launch_decode_gemm(dx.get(), dw.get(), y.get(), true, T, N, K, sc.ws(), grid, st);
    CUDA_CHECK(cudaStreamSynchronize(st));
  };
  const auto vs_ref = [&](const std::vector<double>& got, int T) {
    std::vector<double> g_s, r_s;
    for (std::size_t j = 0; j < rows_n.size(); ++j)
      for (int t = 0; t < T; ++t) {
        g_s.push_back(got[static_cast<std::size_t>(t) * N + rows_n[j]]);
        r_s.push_back(ref[j * kMaxT + t]);
      }
    return compare(g_s, r_s);
  };
  for (const int T : {1, 2, 17, 64, 256}) {
    SCOPED_TRACE(named("T", T));
    const std::size_t n = static_cast<std::size_t>(T) * N;
    DeviceArray<unsigned char> ye(n * 4), yg(n * 4), yo(n * 4);
    run(ye, T, sc.sms);
    EXPECT_TRUE(counters_zero()) << "default grid left a counter set";
    const std::vector<double> e_def = download(ye.get(), n, true);
    const ErrStats ed = vs_ref(e_def, T);
    EXPECT_EQ(ed.nan, 0u);
    EXPECT_LE(ed.rel_l2, 2e-5) << "default grid vs fp64";
    for (int rep = 0; rep < 3; ++rep) {
      run(yo, T, sc.sms);
      EXPECT_EQ(raw(ye, n * 4), raw(yo, n * 4)) << "eager repeat " << rep << " differs";
    }
    for (const int grid : {1, 20, 37, sc.sms - 1, 2 * sc.sms}) {
      SCOPED_TRACE(named("grid ", grid));
      run(yo, T, grid);
      EXPECT_TRUE(counters_zero()) << "a counter was left set";
      const std::vector<double> got = download(yo.get(), n, true);
      const ErrStats er = vs_ref(got, T);
      EXPECT_EQ(er.nan, 0u);
      EXPECT_LE(er.rel_l2, 2e-5) << "vs fp64";
      const ErrStats e = compare(got, e_def);
      EXPECT_EQ(e.nan, 0u);
      EXPECT_LE(e.rel_l2, 2e-5) << "vs the default grid";
    }
    poison(yg);
    poison(sc.partial);
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    cuda::launch_decode_gemm(dx.get(), dw.get(), yg.get(), true, T, N, K, sc.ws(), sc.sms, st);
    CUDA_CHECK(cudaStreamEndCapture(st, &graph));
    cudaGraphExec_t ex = nullptr;
    CUDA_CHECK(cudaGraphInstantiate(&ex, graph, 0));
    for (int rep = 0; rep < 3; ++rep) {
      CUDA_CHECK(cudaGraphLaunch(ex, st));
      CUDA_CHECK(cudaStreamSynchronize(st));
      EXPECT_EQ(raw(ye, n * 4), raw(yg, n * 4)) << "graph replay " << rep << " differs from eager";
    }
    EXPECT_TRUE(counters_zero()) << "graph replay left a counter set";
    cudaGraphExecDestroy(ex);
    cudaGraphDestroy(graph);
  }
  // A grid the workspace cannot hold is refused, not overrun.
  DeviceArray<unsigned char> y1(static_cast<std::size_t>(N) * 4);
  EXPECT_THROW(cuda::launch_decode_gemm(dx.get(), dw.get(), y1.get(), true, 1, N, K, sc.ws(),
                                        2 * sc.sms + 1, st),
               InternalError);
  cudaStreamDestroy(st);
}

// Gemm routes: kForce sends every applicable call to the kernel (eager == graph == direct launch,
// bitwise), falls back to cuBLAS where it does not apply (K % 64 != 0, T > 256, misaligned x);
// autotune() times it and keeps it only where it wins.
TEST(GpuGemmDecode, GemmRoutesAndFallsBack) {
  REQUIRE_GPU();
  require_kernel();
  Scratch sc;
  cudaStream_t st = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cuda::Gemm g(st), lib(st);
  g.set_decode(cuda::Gemm::DecodePath::kForce);
  g.set_skinny(false);
  lib.set_decode(cuda::Gemm::DecodePath::kOff);
  lib.set_skinny(false);
  const int N = 4096, K = 4096, T = 64;
  DeviceArray<bf16> dx(static_cast<std::size_t>(300) * K + 8), dw(static_cast<std::size_t>(N) * K);
  fill(dx.get(), dx.size(), 31, 1.0f);
  fill(dw.get(), dw.size(), 32, 1.0f / 64);
  CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream fills; `st` is non-blocking
  DeviceArray<bf16> y1(static_cast<std::size_t>(300) * N), y2(y1.size()), y3(y1.size()),
      y4(y1.size());
  g.linear(dx.get(), dw.get(), y1.get(), T, N, K);
  cuda::launch_decode_gemm(dx.get(), dw.get(), y2.get(), false, T, N, K, sc.ws(), sc.sms, st);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  g.linear(dx.get(), dw.get(), y3.get(), T, N, K);
  CUDA_CHECK(cudaStreamEndCapture(st, &graph));
  cudaGraphExec_t ex = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&ex, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(ex, st));
  lib.linear(dx.get(), dw.get(), y4.get(), T, N, K);
  CUDA_CHECK(cudaStreamSynchronize(st));
  const std::size_t n = static_cast<std::size_t>(T) * N;
  const auto a = to_host_bf16(y1.get(), n), b = to_host_bf16(y2.get(), n),
             c = to_host_bf16(y3.get(), n), d = to_host_bf16(y4.get(), n);
  EXPECT_EQ(a, b) << "Gemm::linear (kForce) is not the decode kernel";
  EXPECT_EQ(a, c) << "graph replay differs from the eager call";
  EXPECT_LE(compare(a, d).rel_l2, 4e-3) << "decode kernel vs cuBLAS";
  cudaGraphExecDestroy(ex);
  cudaGraphDestroy(graph);

  // Fallbacks: each of these calls must still be right (cuBLAS), under kForce.
  struct Case {
    const char* what;
    const bf16* x;
    int T, K;
  };
  const Case cases[] = {{"K % 64 != 0", dx.get(), 8, 4032 + 8},
                        {"T > 256", dx.get(), 300, K},
                        {"x not 16-byte aligned", dx.get() + 1, 8, K}};
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.what);
    EXPECT_FALSE(cuda::decode_gemm_applies(cs.x, dw.get(), cs.T, N, cs.K));
    g.linear(cs.x, dw.get(), y1.get(), cs.T, N, cs.K);
    lib.linear(cs.x, dw.get(), y4.get(), cs.T, N, cs.K);
    CUDA_CHECK(cudaStreamSynchronize(st));
    const std::size_t m = static_cast<std::size_t>(cs.T) * N;
    EXPECT_EQ(to_host_bf16(y1.get(), m), to_host_bf16(y4.get(), m)) << "not cuBLAS's result";
  }

  // autotune(): the kernel is timed as a candidate; whatever is chosen, calls agree with cuBLAS.
  cuda::Gemm t(st);
  t.set_decode(cuda::Gemm::DecodePath::kAuto);  // off by default (cuda/gemm.h)
  const auto res = t.autotune({{"o", N, K, false, dw.get()}}, {1, 64, 256}, 5000.0);
  ASSERT_EQ(res.size(), 3u);
  for (const auto& r : res) {
    SCOPED_TRACE(named("T", r.T, " chose " + r.chosen));
    EXPECT_GT(r.decode_us, 0.0) << "the decode kernel was not timed";
    figure(named("gemm_decode_autotune_o_t", r.T, "_decode_us"), r.decode_us);
    figure(named("gemm_decode_autotune_o_t", r.T, "_best_us"), r.best_us);
    t.linear(dx.get(), dw.get(), y1.get(), r.T, N, K);
    lib.linear(dx.get(), dw.get(), y4.get(), r.T, N, K);
    CUDA_CHECK(cudaStreamSynchronize(st));
    const std::size_t m = static_cast<std::size_t>(r.T) * N;
    EXPECT_LE(compare(to_host_bf16(y1.get(), m), to_host_bf16(y4.get(), m)).rel_l2, 1e-2);
  }
  cudaStreamDestroy(st);
}

}  // namespace
}  // namespace strata::gputest
