// Element-wise kernels and their launchers (see kernels.h for the contracts).
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/cuda_check.h"
#include "cuda/fp8.cuh"
#include "cuda/kernels.h"
#include "cuda/rope_kv.cuh"

namespace strata::cuda {

namespace {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024).
__device__ float block_sum(float v) {
  __shared__ float part[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int nw = blockDim.x >> 5;
  v = lane < nw ? part[lane] : 0.0f;
  return warp_sum(v);
}

__global__ void embedding_kernel(const EmbeddingParams p) {
  const int t = blockIdx.x;
  const bf16* src = p.embed + static_cast<long long>(p.tokens[t]) * p.hidden;
  float* dst = p.resid + static_cast<long long>(t) * p.hidden;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) dst[i] = __bfloat162float(src[i]);
}

__global__ void rmsnorm_kernel(const RmsNormParams p) {
  const int r = blockIdx.x;
  const int src_row = p.rows ? p.rows[r] : r;
  float* x = p.resid + static_cast<long long>(src_row) * p.hidden;
  const bf16* d = p.delta ? p.delta + static_cast<long long>(src_row) * p.hidden : nullptr;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x) {
    float v = x[i];
    if (d) {
      v += __bfloat162float(d[i]);
      x[i] = v;
    }
    ss += v * v;
  }
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(p.hidden) + p.eps);
  if (p.out8.codes) {
    std::uint8_t* codes = p.out8.codes + static_cast<long long>(r) * p.hidden;
    // block_sum's barriers made every thread's residual update visible.
    if (p.hidden % 8 == 0 && p.hidden / 8 <= 2 * static_cast<int>(blockDim.x))
      fp8::quantize_row_vec<2>(
          [&](int i, float(&v)[8]) {
            const float4 a = *reinterpret_cast<const float4*>(x + 8 * i);
            const float4 b = *reinterpret_cast<const float4*>(x + 8 * i + 4);
            float w[8];
            fp8::load8_bf16(p.weight + 8 * i, w);
            const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = xs[e] * inv * w[e];
          },
          p.hidden / 8, codes, p.out8.scale + r, p.out8_static);
    else
      fp8::quantize_row([&](int i) { return x[i] * inv * __bfloat162float(p.weight[i]); }, p.hidden,
                        codes, p.out8.scale + r, p.out8_static);
    return;
  }
  bf16* out = p.out + static_cast<long long>(r) * p.hidden;
  for (int i = threadIdx.x; i < p.hidden; i += blockDim.x)
    out[i] = __float2bfloat16_rn(x[i] * inv * __bfloat162float(p.weight[i]));
}

__global__ void rope_kv_kernel(const RopeKvParams p) {
  bf16* pool = p.kv_pool;
  rope_kv_row(p, blockIdx.x,
              [=](long long page, long long off, long long part, int, bf16 k, bf16 v) {
                pool[page + off] = k;
                pool[page + part + off] = v;
              });
}

__global__ void swiglu_kernel(const SwigluParams p) {
  const long long n = static_cast<long long>(p.num_tokens) * p.inter;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long t = i / p.inter, j = i % p.inter;
    const float g = __bfloat162float(p.gu[t * 2 * p.inter + j]);
    const float u = __bfloat162float(p.gu[t * 2 * p.inter + p.inter + j]);
    p.out[i] = __float2bfloat16_rn(g / (1.0f + __expf(-g)) * u);
  }
}

// One block of 1024 threads per token row, the row's products in registers (one pass; inter a
// multiple of 8, at most 8 * 4 * 1024).
constexpr int kSwigluVecThreads = 1024, kSwigluVecPerThread = 4;
__global__ void __launch_bounds__(kSwigluVecThreads) swiglu_fp8_vec_kernel(const SwigluParams p) {
  const long long t = blockIdx.x;
  const bf16* g = p.gu + t * 2 * p.inter;
  const bf16* u = g + p.inter;
  fp8::quantize_row_vec<kSwigluVecPerThread>(
      [&](int i, float(&out)[8]) {
        float gv[8], uv[8];
        fp8::load8_bf16(g + 8 * i, gv);
        fp8::load8_bf16(u + 8 * i, uv);
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = gv[e] / (1.0f + __expf(-gv[e])) * uv[e];
      },
      p.inter / 8, p.out8.codes + t * p.inter, p.out8.scale + t, p.out8_static);
}

// One block per token row: the row's products twice (amax, then codes). Any inter.
__global__ void swiglu_fp8_kernel(const SwigluParams p) {
  const long long t = blockIdx.x;
  const bf16* g = p.gu + t * 2 * p.inter;
  const bf16* u = g + p.inter;
  fp8::quantize_row(
      [&](int j) {
        const float gv = __bfloat162float(g[j]);
        return gv / (1.0f + __expf(-gv)) * __bfloat162float(u[j]);
      },
      p.inter, p.out8.codes + t * p.inter, p.out8.scale + t, p.out8_static);
}

// ---- 16-byte vectorized kernels (issue 19 item 2; RmsNormParams::vec etc.) ----

bool aligned16(const void* p) {
  return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0;
}

// 8 fp32 values to 8 bf16 (RNE) in one 16-byte word.
__device__ __forceinline__ uint4 pack8_bf16(const float (&f)[8]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return u;
}

// One block per row, blockDim.x (a multiple of 32) threads, each holding NV 8-element chunks
// of the row in registers: chunk c of thread i is i + c * blockDim.x. hidden % 8 == 0,
// hidden / 8 <= NV * blockDim.x, all row pointers 16-byte aligned (launch_rmsnorm checks).
template <int NV>
__global__ void __launch_bounds__(1024) rmsnorm_vec_kernel(const RmsNormParams p) {
  const int r = blockIdx.x;
  const int src_row = p.rows ? p.rows[r] : r;
  const int nchunks = p.hidden / 8;
  float* x = p.resid + static_cast<long long>(src_row) * p.hidden;
  const bf16* d = p.delta ? p.delta + static_cast<long long>(src_row) * p.hidden : nullptr;
  float v[NV][8];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int i = threadIdx.x + c * blockDim.x;
    if (i >= nchunks) continue;
    const float4 a = *reinterpret_cast<const float4*>(x + 8 * i);
    const float4 b = *reinterpret_cast<const float4*>(x + 8 * i + 4);
    v[c][0] = a.x, v[c][1] = a.y, v[c][2] = a.z, v[c][3] = a.w;
    v[c][4] = b.x, v[c][5] = b.y, v[c][6] = b.z, v[c][7] = b.w;
    if (d) {
      float dv[8];
      fp8::load8_bf16(d + 8 * i, dv);
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] += dv[e];
      *reinterpret_cast<float4*>(x + 8 * i) = make_float4(v[c][0], v[c][1], v[c][2], v[c][3]);
      *reinterpret_cast<float4*>(x + 8 * i + 4) = make_float4(v[c][4], v[c][5], v[c][6], v[c][7]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[c][e] * v[c][e];
  }
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(p.hidden) + p.eps);
  bf16* out = p.out + static_cast<long long>(r) * p.hidden;
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    const int i = threadIdx.x + c * blockDim.x;
    if (i >= nchunks) continue;
    float w[8], o[8];
    fp8::load8_bf16(p.weight + 8 * i, w);
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = v[c][e] * inv * w[e];
    *reinterpret_cast<uint4*>(out + 8 * i) = pack8_bf16(o);
  }
}

// Largest head_dim / 2 of the vectorized RoPE kernel (its cos/sin row in shared memory).
constexpr int kRopeVecMaxHalf = 256;

// One block per token. cos/sin of the token's angles once per pair index (rope_cos_sin: the
// cached table, or fp64 sincos rounded to fp32, as rope_kv_kernel per element), then one item per 8
// pairs of a q or k head (two 16-byte loads, two stores; k heads also into the page) and one per 8
// elements of a v head (a 16-byte copy into the page). head_dim % 16 == 0, head_dim / 2 <=
// kRopeVecMaxHalf, qkv and kv_pool 16-byte aligned (launch_rope_kv_write checks).
__global__ void rope_kv_vec_kernel(const RopeKvParams p) {
  __shared__ float cs[2 * kRopeVecMaxHalf];  // [half] cos, then [half] sin
  const int t = blockIdx.x;
  const int seq = p.seq_of[t];
  if (seq < 0) return;  // uniform per block: before the barrier
  const int hd = p.head_dim, half = hd / 2;
  const int row_elems = (p.heads + 2 * p.kv_heads) * hd;
  bf16* row = p.qkv + static_cast<long long>(t) * row_elems;
  const int pos = p.positions[t];
  rope_resolve_row(p, t, nullptr);  // ordered before the K/V stores by the barrier below
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float2 r = rope_cos_sin(p, pos, i);
    cs[i] = r.x;
    cs[half + i] = r.y;
  }
  __syncthreads();
  const int kv_slot = (p.slots != nullptr && t < p.num_slot_rows) ? p.slots[t] : pos;
  const int page = p.block_table[static_cast<long long>(seq) * p.table_stride + kv_slot / 16];
  const int slot = kv_slot % 16;
  bf16* base = p.kv_pool + static_cast<long long>(page) * p.page_elems;
  const long long part = p.page_elems / 2;
  const int cph = half / 8;  // rotation items per head
  const int rot_items = (p.heads + p.kv_heads) * cph;
  const int v_items = p.kv_heads * (hd / 8);
  for (int idx = threadIdx.x; idx < rot_items + v_items; idx += blockDim.x) {
    if (idx < rot_items) {
      const int h = idx / cph, i0 = 8 * (idx % cph);
      bf16* va = row + h * hd + i0;
      float a[8], b[8], oa[8], ob[8];
      fp8::load8_bf16(va, a);
      fp8::load8_bf16(va + half, b);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float c = cs[i0 + e], s = cs[half + i0 + e];
        oa[e] = a[e] * c - b[e] * s;
        ob[e] = b[e] * c + a[e] * s;
      }
      const uint4 ua = pack8_bf16(oa), ub = pack8_bf16(ob);
      *reinterpret_cast<uint4*>(va) = ua;
      *reinterpret_cast<uint4*>(va + half) = ub;
      if (h >= p.heads) {  // a k head: into the page (layout: kv_layout.h)
        const long long off = (static_cast<long long>(h - p.heads) * 16 + slot) * hd + i0;
        *reinterpret_cast<uint4*>(base + off) = ua;
        *reinterpret_cast<uint4*>(base + off + half) = ub;
      }
    } else {
      const int j = idx - rot_items, g = j / (hd / 8), d0 = 8 * (j % (hd / 8));
      const bf16* vsrc = row + (p.heads + p.kv_heads + g) * hd + d0;
      const long long off = (static_cast<long long>(g) * 16 + slot) * hd + d0;
      *reinterpret_cast<uint4*>(base + part + off) = *reinterpret_cast<const uint4*>(vsrc);
    }
  }
}

// grid (num_tokens, ceil(inter / 8 / blockDim.x)): thread (t, chunk) writes out[t][8 chunk ..
// 8 chunk + 7], the same expression as swiglu_kernel per element. inter % 8 == 0, gu and out
// 16-byte aligned (launch_swiglu checks).
constexpr int kSwigluVecBf16Threads = 256;
__global__ void __launch_bounds__(kSwigluVecBf16Threads) swiglu_vec_kernel(const SwigluParams p) {
  const int chunk = blockIdx.y * blockDim.x + threadIdx.x;
  if (chunk >= p.inter / 8) return;
  const long long t = blockIdx.x;
  const bf16* g = p.gu + t * 2 * p.inter + 8 * chunk;
  float gv[8], uv[8], o[8];
  fp8::load8_bf16(g, gv);
  fp8::load8_bf16(g + p.inter, uv);
#pragma unroll
  for (int e = 0; e < 8; ++e) o[e] = gv[e] / (1.0f + __expf(-gv[e])) * uv[e];
  *reinterpret_cast<uint4*>(p.out + t * p.inter + 8 * chunk) = pack8_bf16(o);
}

__device__ __forceinline__ unsigned long long splitmix64_dev(unsigned long long x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void random_fill_kernel(const RandomFillParams p) {
  const unsigned long long base = splitmix64_dev(p.seed ^ p.name_hash);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const unsigned long long r = splitmix64_dev(base + static_cast<unsigned long long>(i));
    double s = 0;
    for (int k = 0; k < 4; ++k) s += static_cast<double>((r >> (16 * k)) & 0xffff) / 65536.0;
    const float w = static_cast<float>((s - 2.0) * 1.7320508075688772 * p.scale);
    p.out[i] = __float2bfloat16_rn(p.offset + w);
  }
}

__global__ void argmax_kernel(const ArgmaxParams p) {
  const float* row = p.logits + static_cast<long long>(blockIdx.x) * p.vocab;
  float best = -FLT_MAX;
  int best_i = 0x7fffffff;
  // Thread t visits i = t, t + blockDim, ... in increasing order (keeps the lowest id on ties);
  // kAhead loads are issued before their compares so that one row (0.5 MB for Llama-3's
  // vocabulary) is not read at one L2 round trip per 1024 elements: Nsight Compute measured the
  // one-load-at-a-time loop at 75 us per launch, at batch 1 as at 64 (thirteenth session).
  constexpr int kAhead = 8;
  const int stride = static_cast<int>(blockDim.x);
  int i = static_cast<int>(threadIdx.x);
  for (; i + (kAhead - 1) * stride < p.vocab; i += kAhead * stride) {
    float v[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) v[j] = row[i + j * stride];
#pragma unroll
    for (int j = 0; j < kAhead; ++j)
      if (v[j] > best) best = v[j], best_i = i + j * stride;
  }
  for (; i < p.vocab; i += stride) {
    const float v = row[i];
    if (v > best) best = v, best_i = i;
  }
  __shared__ float sv[32];
  __shared__ int si[32];
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
    if (ov > best || (ov == best && oi < best_i)) best = ov, best_i = oi;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sv[warp] = best, si[warp] = best_i;
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    best = lane < nw ? sv[lane] : -FLT_MAX;
    best_i = lane < nw ? si[lane] : 0x7fffffff;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, best_i, o);
      if (ov > best || (ov == best && oi < best_i)) best = ov, best_i = oi;
    }
    if (lane == 0) {
      p.out[blockIdx.x] = best_i == 0x7fffffff ? 0 : best_i;
      sv[0] = best;
    }
  }
  if (p.log_z == nullptr) return;
  __syncthreads();
  const float mx = sv[0];
  // sum exp(x - max): fp32 per thread, fp64 across the block in a fixed order.
  float z = 0.0f;
  // The same order of additions as one element at a time; the loads kAhead ahead.
  i = static_cast<int>(threadIdx.x);
  for (; i + (kAhead - 1) * stride < p.vocab; i += kAhead * stride) {
    float v[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) v[j] = row[i + j * stride];
#pragma unroll
    for (int j = 0; j < kAhead; ++j) z += expf(v[j] - mx);
  }
  for (; i < p.vocab; i += stride) z += expf(row[i] - mx);
  for (int o = 16; o > 0; o >>= 1) z += __shfl_xor_sync(0xffffffffu, z, o);
  __shared__ double sz[32];
  __syncthreads();  // sv[0] read by every thread before warp 0 reuses the arrays
  if (lane == 0) sz[warp] = z;
  __syncthreads();
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) t += sz[w];
    p.log_z[blockIdx.x] = static_cast<float>(log(t));
  }
}

__global__ void gather_rows_kernel(const bf16* src, const int* rows, int width, bf16* dst) {
  const bf16* s = src + static_cast<long long>(rows[blockIdx.x]) * width;
  bf16* d = dst + static_cast<long long>(blockIdx.x) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

__global__ void fill_bf16_kernel(bf16* out, long long n, float value) {
  const bf16 v = __float2bfloat16_rn(value);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    out[i] = v;
}

int grid_for(long long n, int threads) {
  const long long b = (n + threads - 1) / threads;
  return static_cast<int>(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

}  // namespace

void launch_embedding(const EmbeddingParams& p, cudaStream_t s) {
  if (p.num_tokens == 0) return;
  embedding_kernel<<<p.num_tokens, 256, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

int prefill_fusion_from_env() {
  static const int level = [] {
    const char* v = std::getenv("STRATA_PREFILL_FUSION");
    const std::string s = v ? v : "";
    if (s.empty() || s == "1") return 1;
    if (s == "0") return 0;
    if (s == "2") return 2;
    throw ConfigError("STRATA_PREFILL_FUSION", "'" + s + "' is not 0, 1 or 2");
  }();
  return level;
}

// The kernel a launch runs depends on the row shape and the base pointers only (never on
// num_rows, rows or num_tokens): a row's result must not depend on which rows share the launch
// (tests/cuda/kernels_choice_test.cpp varies the row count with everything else fixed).
bool rmsnorm_vec_applies(const RmsNormParams& p) {
  return p.vec && !p.out8.codes && p.hidden % 8 == 0 && p.hidden / 8 <= 4 * 1024 &&
         aligned16(p.resid) && aligned16(p.out) && aligned16(p.weight) &&
         (p.delta == nullptr || aligned16(p.delta));
}

bool rope_kv_vec_applies(const RopeKvParams& p) {
  return p.vec && p.head_dim % 16 == 0 && p.head_dim / 2 <= kRopeVecMaxHalf &&
         p.page_elems % 8 == 0 && aligned16(p.qkv) && aligned16(p.kv_pool);
}

bool swiglu_vec_applies(const SwigluParams& p) {
  return p.vec && !p.out8.codes && p.inter % 8 == 0 && aligned16(p.gu) && aligned16(p.out);
}

void launch_rmsnorm(const RmsNormParams& p, cudaStream_t s) {
  if (p.num_rows == 0) return;
  const int nchunks = p.hidden / 8;
  if (rmsnorm_vec_applies(p)) {
    // Fewest chunks per thread with at most 1024 threads; threads a multiple of 32.
    const int nv = nchunks <= 1024 ? 1 : nchunks <= 2048 ? 2 : 4;
    const int threads = ((nchunks + nv - 1) / nv + 31) / 32 * 32;
    if (nv == 1)
      rmsnorm_vec_kernel<1><<<p.num_rows, threads, 0, s>>>(p);
    else if (nv == 2)
      rmsnorm_vec_kernel<2><<<p.num_rows, threads, 0, s>>>(p);
    else
      rmsnorm_vec_kernel<4><<<p.num_rows, threads, 0, s>>>(p);
  } else {
    rmsnorm_kernel<<<p.num_rows, 512, 0, s>>>(p);
  }
  CUDA_CHECK_LAUNCH();
}

void launch_rope_kv_write(const RopeKvParams& p, cudaStream_t s) {
  if (p.num_tokens == 0) return;
  check_rope_resolve(p, "launch_rope_kv_write");
  if (rope_kv_vec_applies(p))
    rope_kv_vec_kernel<<<p.num_tokens, 256, 0, s>>>(p);
  else
    rope_kv_kernel<<<p.num_tokens, 256, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

namespace {
__global__ void rope_table_kernel(float2* table, const double* inv_freq, int half, int positions) {
  const long long n = static_cast<long long>(positions) * half;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int pos = static_cast<int>(e / half), i = static_cast<int>(e % half);
    table[e] = rope_angle_cos_sin(pos, inv_freq[i]);
  }
}
}  // namespace

void launch_rope_table(float2* table, const double* inv_freq, int half, int positions,
                       cudaStream_t s) {
  const long long n = static_cast<long long>(positions) * half;
  if (n == 0) return;
  const int blocks = static_cast<int>(std::min<long long>((n + 255) / 256, 4096));
  rope_table_kernel<<<blocks, 256, 0, s>>>(table, inv_freq, half, positions);
  CUDA_CHECK_LAUNCH();
}

void launch_swiglu(const SwigluParams& p, cudaStream_t s) {
  const long long n = static_cast<long long>(p.num_tokens) * p.inter;
  if (n == 0) return;
  if (p.out8.codes && p.inter % 8 == 0 && p.inter / 8 <= kSwigluVecPerThread * kSwigluVecThreads)
    swiglu_fp8_vec_kernel<<<p.num_tokens, kSwigluVecThreads, 0, s>>>(p);
  else if (p.out8.codes)
    swiglu_fp8_kernel<<<p.num_tokens, 512, 0, s>>>(p);
  else if (swiglu_vec_applies(p))
    swiglu_vec_kernel<<<dim3(static_cast<unsigned>(p.num_tokens),
                             static_cast<unsigned>((p.inter / 8 + kSwigluVecBf16Threads - 1) /
                                                   kSwigluVecBf16Threads)),
                        kSwigluVecBf16Threads, 0, s>>>(p);
  else
    swiglu_kernel<<<grid_for(n, 256), 256, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

void launch_random_fill(const RandomFillParams& p, cudaStream_t s) {
  if (p.n == 0) return;
  random_fill_kernel<<<grid_for(p.n, 256), 256, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

void launch_argmax(const ArgmaxParams& p, cudaStream_t s) {
  if (p.rows == 0) return;
  argmax_kernel<<<p.rows, 1024, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

void launch_gather_rows(const bf16* src, const int* rows, int num_rows, int width, bf16* dst,
                        cudaStream_t s) {
  if (num_rows == 0) return;
  gather_rows_kernel<<<num_rows, 256, 0, s>>>(src, rows, width, dst);
  CUDA_CHECK_LAUNCH();
}

void launch_fill_bf16(bf16* out, long long n, float value, cudaStream_t s) {
  if (n == 0) return;
  fill_bf16_kernel<<<grid_for(n, 256), 256, 0, s>>>(out, n, value);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
