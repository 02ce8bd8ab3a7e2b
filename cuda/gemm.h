// Linear layers through cuBLAS: y[T, N] = x[T, K] . W[N, K]^T (HF weight layout, row-major),
// bf16 inputs, fp32 accumulation, bf16 or fp32 output. A fixed workspace is given to cuBLAS
// so calls can be captured in CUDA graphs. One Gemm per device/stream, not thread-safe.
//
// Decode-sized GEMMs can be autotuned (docs/cuda-backend.md "GEMMs"): autotune() times
// cuBLAS's default against the top cublasLt heuristic algorithms (and split-K variants of
// them) for given shapes and row counts, keeps a cublasLt algorithm only when it is faster and
// its output agrees with the default's, and later calls with exactly that (N, K, T, output
// type) use it. On sm_90 the Hopper decode GEMM (cuda/gemm_decode.h, 1..256 rows) is a third
// candidate, kept on the same terms.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/device_buffer.h"
#include "cuda/fp8.h"
#include "cuda/gemm_decode.h"

namespace strata::cuda {

// One weight of a tuning run: y[T, N] = x[T, K] . w^T.
struct GemmShape {
  std::string name;
  int N = 0, K = 0;
  bool f32out = false;
  const __nv_bfloat16* w = nullptr;  // [N, K] on the device
};
struct GemmTuneResult {
  std::string name;
  int N = 0, K = 0, T = 0;
  bool f32out = false;
  double default_us = 0.0;  // cublasGemmEx, CUBLAS_GEMM_DEFAULT
  double best_us = 0.0;     // the kept choice (default_us when the default won)
  double skinny_us = 0.0;   // the skinny kernel (1..kSkinnyMaxRows rows; 0 = not timed)
  double decode_us = 0.0;   // the Hopper decode GEMM (cuda/gemm_decode.h; 0 = not timed)
  int candidates = 0;       // cublasLt algorithms timed
  int rejected = 0;         // candidates that failed to run or disagreed with the default
  std::string
      chosen;  // "default", "skinny", "decode-wgmma" or "lt algo=.. tile=.. stages=.. splitk=.."
};

// Skinny GEMMs (cuda/gemm_skinny.cu): 1..kSkinnyMaxRows rows (single-stream decode), a kernel of
// Strata's own that streams W with 16-byte loads and reduces in a fixed order. Applies when
// K % 8 == 0 and x, w are 16-byte aligned; y is [T, N] bf16 or fp32.
inline constexpr int kSkinnyMaxRows = 2;
bool skinny_gemm_applies(const void* x, const void* w, const void* y, int T, int N, int K);
void launch_skinny_gemm(const __nv_bfloat16* x, const __nv_bfloat16* w, void* y, bool f32out, int T,
                        int N, int K, cudaStream_t s);

// Reads `bytes` of the zeroed `buf` through the L2 and writes nothing (sink only in principle):
// what the L2 held is evicted, so that the call timed after it reads its weights from HBM as a
// decode step does (each layer's weights arrive cold there, while repeated calls of one shape
// find a matrix smaller than the L2 - o and qkv at 8B, every FP8 one but gate_up - in it).
void launch_l2_evict(const void* buf, std::size_t bytes, unsigned* sink, cudaStream_t s);

// sums[0] += sum (a - ref)^2, sums[1] += sum ref^2 over n elements (bf16 or fp32).
void launch_diff_norms(const void* a, const void* ref, bool f32, long long n, double* sums,
                       cudaStream_t s);

class Gemm {
 public:
  explicit Gemm(cudaStream_t stream, std::size_t workspace_bytes = 32u << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void linear(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y, int T, int N,
              int K);
  void linear_f32out(const __nv_bfloat16* x, const __nv_bfloat16* w, float* y, int T, int N, int K);
  // The residual add in the GEMM's epilogue (issue 19 item 2, prefill): resid[T, N] += x . W^T,
  // fp32 accumulation added to the fp32 rows in place (beta = 1, C = D = resid, fp32 C/D with
  // bf16 A/B: one of cuBLAS's supported type combinations; BLAS's C is input and output, i.e.
  // cuBLASLt's in-place case C == D with Cdesc == Ddesc). The product is not rounded to bf16
  // before the add (linear() + the RMSNorm's add did). cuBLAS's default algorithm for the shape,
  // never the skinny kernel nor a tuned plan (those are decode paths: callers keep linear()
  // there).
  void linear_residual(const __nv_bfloat16* x, const __nv_bfloat16* w, float* resid, int T, int N,
                       int K);
  // FP8 (W8A8, cuda/fp8.h): y[T, N] = bf16((x̂ · Ŵ^T) * x.scale[t] * w.scale[n]) with x̂ [T, K] and
  // Ŵ [N, K] e4m3, through one of four kernels (set_fp8_path): the CUDA-core skinny FP8 kernel
  // (1..kSkinnyFp8MaxRows rows), the tensor-core small-row kernel in its two shapes
  // (..kSmallFp8MaxRows), or cuBLASLt's e4m3 GEMM
  // with outer-vector (per-row, per-column) fp32 scales and fast accumulation off (partial sums
  // promoted to fp32, which the K = 14336 reduction needs), one cached plan per (N, K, T). Where
  // cuBLASLt offers no outer-vector algorithm the product goes to an fp32 buffer in row chunks
  // and launch_scale_outer applies the scales (fp8_outer_vec() says which ran). K % 16 == 0.
  void linear_fp8(Fp8Rows x, Fp8Rows w, __nv_bfloat16* y, int T, int N, int K);
  // Allocates the fallback's fp32 buffer (acc_bytes) before any linear_fp8 call: plans are made
  // at first use, which may be inside a graph capture, where nothing may be allocated.
  void enable_fp8(std::size_t acc_bytes = 64u << 20);
  // Whether the last cuBLASLt FP8 plan made had an outer-vector algorithm (true until one lacks
  // it).
  bool fp8_outer_vec() const { return fp8_outer_vec_; }
  // Test hook: force the fallback (scalar-scaled cuBLASLt into fp32, then launch_scale_outer).
  // Which kernel runs an FP8 call: kAuto = autotune_fp8()'s choice for that (N, K, T), else the
  // default rule (up to kWarpKDefaultMaxRows: kWarpK; up to kFp8MmaDefaultMaxRows: tensor cores;
  // more: cuBLASLt).
  // The others force a path where it applies (benchmarks and tests). kWgmma: the Hopper decode
  // GEMM's e4m3 variant (launch_decode_gemm_fp8, 1..256 rows, K % 128 == 0; passed on the H200
  // on 2026-12-02): autotune_fp8 offers it as a candidate unless STRATA_DECODE_GEMM_FP8=off;
  // forcing it allocates the decode GEMM's workspace here (never inside a call). Where it does not
  // apply a call takes the default rule's path. kWarpK: K split across the warps of a block
  // (launch_warpk_gemm_fp8, 1..kWarpKFp8MaxRows = 32 rows, K % 256 == 0; first written 2026-12-02,
  // tenth session), launched with programmatic dependent launch unless set_fp8_pdl(false) or
  // STRATA_FP8_PDL=0; the default rule's kernel up to kWarpKDefaultMaxRows and an autotune_fp8
  // candidate (checked like kWgmma) unless STRATA_FP8_WARPK=off. kWgmma is launched the same
  // way (its first ring of W tiles requested while the previous kernel drains; cuda/gemm_decode.h).
  enum class Fp8Path { kAuto, kCores, kMma, kMmaWide, kLt, kWgmma, kWarpK };
  void set_fp8_pdl(bool on) { fp8_pdl_ = on; }
  bool fp8_pdl() const { return fp8_pdl_; }
  void set_fp8_path(Fp8Path p) {
    fp8_path_ = p;
    if (p == Fp8Path::kWgmma) enable_decode_workspace();
  }
  // Times every applicable path per shape and row count on the given weights (outside graph
  // capture; synchronises the stream) and keeps the fastest for later kAuto calls. The kWgmma
  // candidate (unless STRATA_DECODE_GEMM_FP8=off) must also agree with the default rule's output
  // (rel L2 <= 1e-2, GemmTuneResult::decode_us, rejected counted) to be kept.
  struct Fp8Shape {
    std::string name;
    int N = 0, K = 0;
    Fp8Rows w;
  };
  std::vector<GemmTuneResult> autotune_fp8(const std::vector<Fp8Shape>& shapes,
                                           const std::vector<int>& rows);
  // Drops the FP8 plans made so far.
  void set_fp8_fallback(bool on);

  // Tunes every shape at every row count of `rows` (outside graph capture; synchronises the
  // stream). Stops early, keeping the defaults, once `budget_ms` of wall time is spent.
  // Temporary device buffers: rows.max * (K.max * 2 + N.max * 8) bytes.
  std::vector<GemmTuneResult> autotune(const std::vector<GemmShape>& shapes,
                                       const std::vector<int>& rows, double budget_ms = 1000.0);
  int tuned_count() const { return static_cast<int>(plans_.size()); }
  // Whether calls with 1..kSkinnyMaxRows rows use the skinny kernel (default: on) instead of
  // cuBLAS / a tuned cublasLt plan. For benchmarks and tests comparing the two.
  void set_skinny(bool on) { skinny_ = on; }
  bool skinny() const { return skinny_; }
  // The Hopper decode GEMM: kAuto = where autotune() chose it; kOff = never, not even timed by
  // autotune (the default: on the H200 on 2026-12-02 its graph replay differed from eager and grids
  // 1 / 37 differed from the default grid at T = 1 - gpu_gemm_decode_test - and it did not beat
  // the tuned library at 64-256 rows; STRATA_DECODE_GEMM=auto opts in); kForce = every call it
  // applies to (benchmarks, tests). Its workspace (decode_gemm_partial_floats(SMs) floats, 35 MB on
  // 132 SMs) is allocated here for kForce and by autotune() otherwise - never inside a call, so
  // that calls stay capturable.
  enum class DecodePath { kAuto, kOff, kForce };
  void set_decode(DecodePath p);
  DecodePath decode() const { return decode_path_; }

 private:
  struct LtPlan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using Key = std::tuple<int, int, int, bool>;  // N, K, T, f32out
  void run(const void* x, const __nv_bfloat16* w, void* y, bool f32out, int T, int N, int K);
  static void destroy(LtPlan& p);

  // cuBLASLt e4m3 GEMMs (linear_fp8): per (N, K, T), the outer-vector plan (ok = an algorithm
  // exists) and the scalar-scaled fallback plan into fp32 over row chunks of fallback_rows.
  struct Fp8Plan {
    LtPlan outer, scalar;
    bool outer_ok = false, scalar_ok = false;
    int chunk_rows = 0;
  };
  using Key3 = std::tuple<int, int, int>;
  Fp8Plan& fp8_plan(int T, int N, int K);
  std::map<Key3, Fp8Plan> fp8_plans_;
  DeviceArray<float> fp8_acc_;  // fallback accumulator (enable_fp8)
  DeviceArray<float> fp8_one_;  // 1.0f (the fallback's scalar scales)
  bool fp8_outer_vec_ = true, fp8_force_fallback_ = false;
  bool fp8_pdl_ = true;    // kWarpK's and kWgmma's programmatic dependent launch (the constructor
                           // reads STRATA_FP8_PDL)
  bool fp8_warpk_ = true;  // kWarpK in the default rule and the autotune (STRATA_FP8_WARPK=off: no)
  Fp8Path fp8_path_ = Fp8Path::kAuto;
  std::map<Key3, Fp8Path> fp8_tuned_;  // autotune_fp8's choices
  void run_fp8(Fp8Path path, Fp8Rows x, Fp8Rows w, __nv_bfloat16* y, int T, int N, int K);
  // Without tuning: up to kWarpKDefaultMaxRows the split-K-in-block kernel, up to
  // kFp8MmaDefaultMaxRows tensor cores, more cuBLASLt.
  static constexpr int kWarpKDefaultMaxRows = 8;
  static constexpr int kFp8MmaDefaultMaxRows = 16;
  Fp8Path fp8_default_path(int T) const;
  // 1 row CUDA cores, up to kFp8MmaDefaultMaxRows tensor cores, more cuBLASLt (the rule with
  // STRATA_FP8_WARPK=off, and autotune_fp8's reference).
  static Fp8Path fp8_rule_before_warpk(int T);
  static bool fp8_path_applies(Fp8Path p, const void* x, const void* w, int T, int N, int K);
  int num_sms_ = 132;

  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  DeviceArray<unsigned char> workspace_;
  std::map<Key, LtPlan> plans_;
  bool skinny_ = true;
  std::set<Key> no_skinny_;  // shapes where autotune() found the library faster
  // The Hopper decode GEMM: the keys autotune() gave it, its scratch (one stream: calls never
  // overlap), allocated once by enable_decode_workspace().
  DecodePath decode_path_ = decode_path_from_env();
  std::set<Key> decode_keys_;
  DeviceArray<float> decode_partial_;
  DeviceArray<unsigned> decode_counters_;
  void enable_decode_workspace();
  static DecodePath decode_path_from_env();
  bool run_decode(const void* x, const __nv_bfloat16* w, void* y, bool f32out, int T, int N, int K);
};

}  // namespace strata::cuda
