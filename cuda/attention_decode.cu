// Decode attention over paged KV: split-KV with a merge kernel. One block per
// (sequence, kv head, split) serves the whole GQA group: each K and V row is loaded once
// (16-byte loads, head_dim/8 lanes per key) and used for all `group` query heads. Keys are
// processed in chunks of kChunk slots with an online softmax, so a split may be any length.
// Deterministic: the partial sums of a block's key slots are reduced in a fixed order (warp
// butterfly, then the warps in index order), not with shared-memory float atomics, whose
// order depends on warp timing (issue 9: it made identical steps differ run to run after
// bf16 rounding of the output).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/attention.h"
#include "cuda/cp_async.cuh"
#include "cuda/cuda_check.h"
#include "cuda/dispatch.h"
#include "cuda/mma.cuh"
#include "cuda/prefill_frag.h"
#include "cuda/sparse/sparse_common.cuh"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128, kWarps = kThreads / 32, kChunk = 256,
              kMaxGroup = 8;  // kMaxGroup: GQA ratio limit

__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x, f[2 * i + 1] = x.y;
  }
}

// 8 e4m3 codes to fp32, exactly (e4m3 is a subset of fp16): element 2i is the low byte of pair i.
__device__ __forceinline__ void unpack8_e4m3(const uint2& u, float* f) {
  const auto* c = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2 h(__nv_cvt_fp8x2_to_halfraw2(c[i], __NV_E4M3));
    const float2 x = __half22float2(h);
    f[2 * i] = x.x, f[2 * i + 1] = x.y;
  }
}

// One lane's 8 elements of one K or V row, bf16 (16 bytes) or e4m3 codes (8 bytes, kv_pool8);
// `elem` is the element offset in the pool.
template <bool kKv8>
struct KvRow8 {
  uint4 raw;
  __device__ __forceinline__ void load(const DecodeAttentionParams& p, long long elem) {
    raw = *reinterpret_cast<const uint4*>(p.kv_pool + elem);
  }
  __device__ __forceinline__ void zero() { raw = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ void unpack(float* f) const { unpack8(raw, f); }
};
template <>
struct KvRow8<true> {
  uint2 raw;
  __device__ __forceinline__ void load(const DecodeAttentionParams& p, long long elem) {
    raw = *reinterpret_cast<const uint2*>(p.kv_pool8 + elem);
  }
  __device__ __forceinline__ void zero() { raw = make_uint2(0, 0); }
  __device__ __forceinline__ void unpack(float* f) const { unpack8_e4m3(raw, f); }
};

// Keys [k0, k1) of split `split` of batch entry b: num_splits ranges of equal length rounded up
// to a whole page (16 slots), the last one short; empty past the sequence's end.
struct KeyRange {
  int k0, k1;
};
__device__ __forceinline__ KeyRange split_keys(const DecodeAttentionParams& p, int b, int split) {
  const int len = max(p.seq_len[b], 0);
  const int per = len > 0 ? ((len + p.num_splits - 1) / p.num_splits + 15) / 16 * 16 : 0;
  const int k0 = min(split * per, len);
  return {k0, min(k0 + per, len)};
}

// The CUDA-core kernels' query: this lane's 8 dims (sub) of every query head of KV group g as
// fp32; heads past the group are zero.
template <int HD, int MAXG>
__device__ __forceinline__ void load_q_group(const DecodeAttentionParams& p, int b, int g,
                                             int group, int sub, float (&q)[MAXG][8]) {
  const bf16* qrow = p.q + static_cast<long long>(p.q_row[b]) * p.q_stride;
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh) {
    if (hh < group) {
      const uint4 u = *reinterpret_cast<const uint4*>(qrow + (g * group + hh) * HD + sub * 8);
      unpack8(u, q[hh]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) q[hh][e] = 0.0f;
    }
  }
}

// MAXG: the group size rounded up to 4 or 8 (registers for q and the accumulators). kKv8: the
// pages are e4m3 codes (DecodeAttentionParams::kv_pool8) with this KV head's scales folded out.
template <int HD, int MAXG, int kUnroll, bool kKv8>
__global__ void __launch_bounds__(kThreads) decode_attention_kernel(const DecodeAttentionParams p) {
  constexpr int kLpk = HD / 8;         // lanes per key
  constexpr int kKpw = 32 / kLpk;      // keys per warp per pass
  constexpr int kKpi = kKpw * kWarps;  // keys per block per pass
  __shared__ float sS[MAXG][kChunk];
  __shared__ float sAlpha[MAXG], sMrow[MAXG], sLrow[MAXG];
  __shared__ float sRed[kWarps][MAXG][HD];  // per-warp partial O, summed in warp order

  const int b = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sub = lane % kLpk, kslot = warp * kKpw + lane / kLpk;
  const KeyRange keys = split_keys(p, b, split);
  const int k0 = keys.k0, k1 = keys.k1;

  // This lane's 8 dims of every query head of the group.
  float q[MAXG][8];
  load_q_group<HD, MAXG>(p, b, g, group, sub, q);
  float acc[MAXG][8];
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[hh][e] = 0.0f;
  if (threadIdx.x < MAXG) sMrow[threadIdx.x] = -INFINITY, sLrow[threadIdx.x] = 0.0f;

  const int* table = p.block_table + static_cast<long long>(b) * p.table_stride;
  const long long part = p.page_elems / 2;
  auto slot_off = [&](int j) {  // element offset of this lane's 8 elements of slot j's K
    return static_cast<long long>(table[j >> 4]) * p.page_elems +
           (static_cast<long long>(g) * 16 + (j & 15)) * HD + sub * 8;
  };
  // fp8: logits scale * s_k * q.code, the output s_v * sum p code (1 for bf16: unchanged bits).
  const float qk_scale = kKv8 ? p.scale * p.kv_scales[g * 2] : p.scale;
  const float v_scale = kKv8 ? p.kv_scales[g * 2 + 1] : 1.0f;
  for (int c0 = k0; c0 < k1; c0 += kChunk) {
    const int c1 = min(c0 + kChunk, k1);
    __syncthreads();
    // 1. Scaled logits of the chunk for every head of the group. The loop bounds are
    // uniform across the block (every lane reaches the shuffles); lanes past c1 load nothing.
    for (int base = c0; base < c1; base += kKpi * kUnroll) {
      KvRow8<kKv8> raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = base + u * kKpi + kslot;
        if (j < c1)
          raw[u].load(p, slot_off(j));
        else
          raw[u].zero();
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = base + u * kKpi + kslot;
        float kf[8];
        raw[u].unpack(kf);
#pragma unroll
        for (int hh = 0; hh < MAXG; ++hh) {
          float d = 0.0f;
#pragma unroll
          for (int e = 0; e < 8; ++e) d += q[hh][e] * kf[e];
#pragma unroll
          for (int o = kLpk / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
          if (sub == 0 && j < c1 && hh < group) sS[hh][j - c0] = d * qk_scale;
        }
      }
    }
    __syncthreads();
    // 2. Online softmax per head (warp w takes heads w, w + 4).
    for (int hh = warp; hh < group; hh += kWarps) {
      float mx = -INFINITY;
      for (int j = lane; j < c1 - c0; j += 32) mx = fmaxf(mx, sS[hh][j]);
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sMrow[hh], m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int j = lane; j < c1 - c0; j += 32) {
        const float s = sS[hh][j];
        if (p.logits && c0 + j < p.logits_stride)  // rows longer than the stride: not needed
          p.logits[(static_cast<long long>(b) * p.heads + g * group + hh) * p.logits_stride + c0 +
                   j] = s;
        const float e = __expf(s - m_new);
        sS[hh][j] = e;
        sum += e;
      }
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (lane == 0) {
        const float alpha = __expf(m_old - m_new);  // m_old = -inf -> 0
        sAlpha[hh] = alpha;
        sMrow[hh] = m_new;
        sLrow[hh] = sLrow[hh] * alpha + sum;
      }
    }
    __syncthreads();
    // 3. acc = acc * alpha + sum_j p_j v_j (this thread's keys and 8 dims).
#pragma unroll
    for (int hh = 0; hh < MAXG; ++hh)
      if (hh < group) {
        const float a = sAlpha[hh];
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[hh][e] *= a;
      }
    for (int base = c0; base < c1; base += kKpi * kUnroll) {
      KvRow8<kKv8> raw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = base + u * kKpi + kslot;
        if (j < c1)
          raw[u].load(p, slot_off(j) + part);
        else
          raw[u].zero();
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int j = base + u * kKpi + kslot;
        if (j >= c1) continue;
        float vf[8];
        raw[u].unpack(vf);
#pragma unroll
        for (int hh = 0; hh < MAXG; ++hh)
          if (hh < group) {
            const float pj = sS[hh][j - c0];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[hh][e] += pj * vf[e];
          }
      }
    }
  }
  // Reduce the key slots' partial sums in a fixed order and write this split's partial
  // result. Lanes lane, lane ^ kLpk, ... hold the same 8 dims of different keys: a xor
  // butterfly over them (group is block-uniform, so every lane reaches the shuffles), then
  // lanes [0, kLpk) of each warp store the warp's sum and the warps are added in order.
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh)
    if (hh < group)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float v = acc[hh][e];
#pragma unroll
        for (int o = 16; o >= kLpk; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane < kLpk) sRed[warp][hh][sub * 8 + e] = v;
      }
  __syncthreads();
  for (int i = threadIdx.x; i < group * HD; i += kThreads) {
    const int hh = i / HD, d = i % HD;
    const long long idx =
        (static_cast<long long>(b) * p.heads + g * group + hh) * p.num_splits + split;
    float o = sRed[0][hh][d];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) o += sRed[w][hh][d];
    p.part_o[idx * HD + d] = kKv8 ? o * v_scale : o;
    if (d == 0) {
      p.part_ml[idx * 2] = sMrow[hh];
      p.part_ml[idx * 2 + 1] = sLrow[hh];
    }
  }
}

// ---- the pipelined kernel (kDecodePipelined) ----------------------------------------------
// Tiles of kPTile keys (two pages), K and V of a tile staged together into shared memory by
// cp.async, kPStages stages (kPStages - 1 tiles in flight while one is computed). Thread
// groups of HD/8 lanes (16 B of a key row per lane) each own keys i * kGroups + group of every
// tile and keep an online softmax (m, l, acc) per query head of the GQA group over them; at the
// end the groups are merged in index order (deterministic) into this split's partial result.
constexpr int kPTile = 32, kPStages = 3;

template <int HD, int MAXG>
constexpr int pipelined_smem_bytes() {
  constexpr int pipe = kPStages * 2 * kPTile * HD * 2;
  constexpr int merge = (kThreads / (HD / 8)) * MAXG * (HD + 2) * 4;
  return pipe > merge ? pipe : merge;
}

template <int HD, int MAXG>
__global__ void __launch_bounds__(kThreads)
    decode_attention_pipelined_kernel(const DecodeAttentionParams p) {
  constexpr int kLpk = HD / 8;                     // lanes per key
  constexpr int kGroups = kThreads / kLpk;         // key groups per block
  constexpr int kKeysPerGroup = kPTile / kGroups;  // keys of a tile per group
  constexpr int kChunks = kPTile * kLpk;           // 16-byte chunks of one K (or V) tile
  constexpr int kLoads = 2 * kChunks / kThreads;   // cp.async per thread per tile
  constexpr int kTileElems = kPTile * HD;          // bf16 of one K (or V) tile
  static_assert(kPTile % kGroups == 0 && (2 * kChunks) % kThreads == 0);
  extern __shared__ uint4 smem_raw[];
  bf16* const sbase = reinterpret_cast<bf16*>(smem_raw);

  const int b = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int tid = threadIdx.x, kg = tid / kLpk, sub = tid % kLpk;
  const KeyRange keys = split_keys(p, b, split);
  const int k0 = keys.k0, k1 = keys.k1;

  float q[MAXG][8];
  load_q_group<HD, MAXG>(p, b, g, group, sub, q);
  float m[MAXG], l[MAXG], acc[MAXG][8];
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh) {
    m[hh] = -INFINITY, l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[hh][e] = 0.0f;
  }

  const int* table = p.block_table + static_cast<long long>(b) * p.table_stride;
  const long long half = p.page_elems / 2;
  const int ntiles = k1 > k0 ? (k1 - k0 + kPTile - 1) / kPTile : 0;
  auto issue = [&](int t) {
    bf16* const dst0 = sbase + (t % kPStages) * 2 * kTileElems;
    const int base = k0 + t * kPTile;
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int c = tid + i * kThreads;
      const int part = c / kChunks, cc = c % kChunks;
      const int key = cc / kLpk, s8 = cc % kLpk;
      const int j = base + key;
      const bool ok = j < k1;
      const bf16* src = ok ? p.kv_pool + static_cast<long long>(table[j >> 4]) * p.page_elems +
                                 part * half + (static_cast<long long>(g) * 16 + (j & 15)) * HD +
                                 s8 * 8
                           : p.kv_pool;
      async::cp_async16(dst0 + part * kTileElems + key * HD + s8 * 8, src, ok);
    }
  };
#pragma unroll
  for (int t = 0; t < kPStages - 1; ++t) {
    if (t < ntiles) issue(t);
    async::cp_async_commit();
  }
  for (int t = 0; t < ntiles; ++t) {
    async::cp_async_wait<kPStages - 2>();
    __syncthreads();  // tile t landed for every thread; tile t - 1's stage is free again
    if (t + kPStages - 1 < ntiles) issue(t + kPStages - 1);
    async::cp_async_commit();
    const bf16* sk = sbase + (t % kPStages) * 2 * kTileElems;
    const bf16* sv = sk + kTileElems;
    const int base = k0 + t * kPTile;
    // 1. The partial dot products of all this group's keys and heads first (independent
    //    chains), then their reductions across the group's lanes interleaved.
    float sc[kKeysPerGroup][MAXG];
#pragma unroll
    for (int i = 0; i < kKeysPerGroup; ++i) {
      float kf[8];
      unpack8(*reinterpret_cast<const uint4*>(sk + (i * kGroups + kg) * HD + sub * 8), kf);
#pragma unroll
      for (int hh = 0; hh < MAXG; ++hh) {
        float d = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) d += q[hh][e] * kf[e];
        sc[i][hh] = d;
      }
    }
#pragma unroll
    for (int o = kLpk / 2; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < kKeysPerGroup; ++i)
#pragma unroll
        for (int hh = 0; hh < MAXG; ++hh) sc[i][hh] += __shfl_xor_sync(0xffffffffu, sc[i][hh], o);
          // 2. Scaled logits (keys past the split's end: -inf), one rescale per head and tile.
#pragma unroll
    for (int i = 0; i < kKeysPerGroup; ++i) {
      const int j = base + i * kGroups + kg;
#pragma unroll
      for (int hh = 0; hh < MAXG; ++hh) {
        sc[i][hh] = j < k1 ? sc[i][hh] * p.scale : -INFINITY;
        if (p.logits && hh < group && sub == 0 && j < k1 && j < p.logits_stride)
          p.logits[(static_cast<long long>(b) * p.heads + g * group + hh) * p.logits_stride + j] =
              sc[i][hh];
      }
    }
#pragma unroll
    for (int hh = 0; hh < MAXG; ++hh) {
      float mt = sc[0][hh];
#pragma unroll
      for (int i = 1; i < kKeysPerGroup; ++i) mt = fmaxf(mt, sc[i][hh]);
      if (mt > m[hh]) {                      // new running maximum (uniform in the group)
        const float c = __expf(m[hh] - mt);  // m = -inf -> 0
        l[hh] *= c;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[hh][e] *= c;
        m[hh] = mt;
      }
    }
    // 3. p = exp(logit - m) and the V accumulation.
#pragma unroll
    for (int i = 0; i < kKeysPerGroup; ++i) {
      const bool valid = base + i * kGroups + kg < k1;
      float vf[8];
      unpack8(*reinterpret_cast<const uint4*>(sv + (i * kGroups + kg) * HD + sub * 8), vf);
#pragma unroll
      for (int hh = 0; hh < MAXG; ++hh) {
        const float pj = valid ? __expf(sc[i][hh] - m[hh]) : 0.0f;
        l[hh] += pj;
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[hh][e] += pj * vf[e];
      }
    }
  }
  async::cp_async_wait<0>();
  __syncthreads();  // the stages are reused below

  // Merge the groups in index order.
  float* const sM = reinterpret_cast<float*>(smem_raw);  // [kGroups][MAXG]
  float* const sL = sM + kGroups * MAXG;                 // [kGroups][MAXG]
  float* const sO = sL + kGroups * MAXG;                 // [kGroups][MAXG][HD]
#pragma unroll
  for (int hh = 0; hh < MAXG; ++hh) {
    if (hh >= group) continue;
    if (sub == 0) sM[kg * MAXG + hh] = m[hh], sL[kg * MAXG + hh] = l[hh];
#pragma unroll
    for (int e = 0; e < 8; ++e) sO[(kg * MAXG + hh) * HD + sub * 8 + e] = acc[hh][e];
  }
  __syncthreads();
  for (int i = tid; i < group * HD; i += kThreads) {
    const int hh = i / HD, d = i % HD;
    float mx = -INFINITY;
    for (int k = 0; k < kGroups; ++k) mx = fmaxf(mx, sM[k * MAXG + hh]);
    float o = 0.0f, lsum = 0.0f;
    if (mx != -INFINITY)
      for (int k = 0; k < kGroups; ++k) {
        const float mk = sM[k * MAXG + hh];
        if (mk == -INFINITY) continue;
        const float w = __expf(mk - mx);
        o += sO[(k * MAXG + hh) * HD + d] * w;
        lsum += sL[k * MAXG + hh] * w;
      }
    const long long idx =
        (static_cast<long long>(b) * p.heads + g * group + hh) * p.num_splits + split;
    p.part_o[idx * HD + d] = o;
    if (d == 0) {
      p.part_ml[idx * 2] = mx;
      p.part_ml[idx * 2 + 1] = lsum;
    }
  }
}

// ---- the tensor-core kernel (kDecodeMma) -------------------------------------------------
// The GQA group's query heads are the rows of one m16 tile (rows past the group are zero), so
// S = Q K^T and O += P V run as mma.sync m16n8k16 (fp32 accumulate): no per-element FMAs or
// shuffle reductions of dot products, which bounded the CUDA-core kernels. Each warp owns whole
// pages: warp w of a block takes pages w, w + W, w + 2W, ... of the split's key range and
// streams them through its own S-stage cp.async ring (K and V of a page, 16 keys, together), so
// warps never wait on each other; the next page's id is read one page ahead, off the copy's
// critical path. Keys past the split's end are zero-filled (V too: 0 x NaN in a poisoned tail
// would be NaN) and masked to -inf. Each warp keeps an online softmax (log2 domain) per query
// head; P is rounded to 16 bits for P V, as in the FA2 prefill kernel. At the end the W warps
// are merged in index order (deterministic). What the page element type changes (the copy, the
// fragments, the scales) is a policy: MmaBf16Kv or MmaE4m3Kv.

// bf16 pages: rows padded by 8 bf16 so ldmatrix is bank-conflict free; K through ldmatrix and V
// through ldmatrix.trans into bf16 mma fragments; P in bf16.
template <int HD>
struct MmaBf16Kv {
  static constexpr int kLd = HD + 8;           // bf16 per padded row
  static constexpr int kPageElems = 16 * kLd;  // one K (or V) page of one kv head
  static constexpr int kStageBytes = 2 * kPageElems * 2;
  static constexpr int kKs = HD / 16;  // k-steps of Q K^T
  struct Q {
    unsigned a[kKs][2];  // A fragments, rows 0-7 (rows 8-15 are zero)
    float mul;           // logits = mul * the Q K^T accumulator
  };
  // Row qr = query head g * group + qr (rows >= group are zero).
  __device__ static void load_q(const DecodeAttentionParams& p, int b, int g, int group, int qr,
                                int qc, Q& q) {
    const bf16* qrow =
        p.q + static_cast<long long>(p.q_row[b]) * p.q_stride + (g * group + qr) * HD + 2 * qc;
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
      q.a[ks][0] = qr < group ? *reinterpret_cast<const unsigned*>(qrow + ks * 16) : 0u;
      q.a[ks][1] = qr < group ? *reinterpret_cast<const unsigned*>(qrow + ks * 16 + 8) : 0u;
    }
    q.mul = p.scale;
  }
  // This lane's share of the copy of pool page `page` (K and V of kv head g; keys key0 + 0..15,
  // those at or past k1 zero-filled) into the stage at dst.
  __device__ static void issue(const DecodeAttentionParams& p, unsigned char* dst, long long page,
                               int g, int key0, int k1, int lane) {
    constexpr int kLpk = HD / 8;                // 16-byte chunks per key row
    constexpr int kLoads = 2 * 16 * kLpk / 32;  // cp.async per lane per page (K and V)
    bf16* const d = reinterpret_cast<bf16*>(dst);
    const bf16* src = p.kv_pool + page * p.page_elems + static_cast<long long>(g) * 16 * HD;
    const long long half = p.page_elems / 2;
#pragma unroll
    for (int c = 0; c < kLoads; ++c) {
      const int chunk = lane + c * 32, part = chunk / (16 * kLpk), cc = chunk % (16 * kLpk);
      const int key = cc / kLpk, s8 = cc % kLpk;
      const bool ok = key0 + key < k1;
      async::cp_async16(d + part * kPageElems + key * kLd + s8 * 8,
                        ok ? src + part * half + key * HD + s8 * 8 : p.kv_pool, ok);
    }
  }
  // s += Q K^T for the stage's 16 keys: two n-tiles (keys 0-7, 8-15).
  __device__ static void scores(float (&s)[2][4], const Q& q, const unsigned char* stage,
                                int lane) {
    const bf16* sk = reinterpret_cast<const bf16*>(stage);
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
      unsigned kb[4];
      mma::ldmatrix_x4(kb, sk + frag::b_row(lane) * kLd + ks * 16 + frag::b_col(lane));
      const unsigned a[4] = {q.a[ks][0], 0u, q.a[ks][1], 0u};
      mma::mma_bf16(s[0], a, kb[0], kb[1]);
      mma::mma_bf16(s[1], a, kb[2], kb[3]);
    }
  }
  __device__ static unsigned pack_p(float lo, float hi) {
    return mma::pack_bf16(lo, hi);
  }
  // o += P V (V via ldmatrix.trans, two O n-tiles, 16 dims, per load).
  __device__ static void accumulate(float (&o)[HD / 8][4], const unsigned (&pa)[4],
                                    const unsigned char* stage, int lane) {
    const bf16* sv = reinterpret_cast<const bf16*>(stage) + kPageElems;
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      unsigned vb[4];
      mma::ldmatrix_x4_trans(vb, sv + frag::a_row(lane) * kLd + dp * 16 + frag::a_col(lane));
      mma::mma_bf16(o[2 * dp], pa, vb[0], vb[1]);
      mma::mma_bf16(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
  }
  // The head_dim index of accumulator element e (0, 1) of O n-tile t in lane column qc.
  __device__ static int o_dim(int t, int qc, int e) {
    return t * 8 + 2 * qc + e;
  }
};

// e4m3 pages (DecodeAttentionParams::kv_pool8): the stage holds the codes as they are in the
// page (16 rows x HD bytes of K, then of V: half the bf16 stage), and each lane turns its codes
// into fp16 mma fragments in registers, not in a shared-memory conversion stage: one 16-byte
// shared load per 16 codes and one cvt.f16x2.e4m3x2 per 2 codes, where a bf16 stage would write
// and read every element again and add a barrier. fp16 rather than bf16 fragments: e4m3 -> f16x2
// is one exact instruction on sm_90 (e4m3 -> bf16 is four, through fp32), every e4m3 value is an
// fp16 normal, and fp16's 11-bit significand holds a bf16 query element exactly. Q (bf16) is
// scaled by a power of two 2^e per query head (its largest |element| into [2^14, 2^15), so
// nothing overflows fp16 and elements above 2^-29 of the row's largest are exact; smaller ones
// move by at most 2^-40 of it) and 2^-e is folded back with the K scale: logits =
// (scale * s_k * 2^-e) * sum_d (2^e q_d) code_d -- the oracle's scale * sum_d q_d (code_d s_k) with
// the power-of-two scales folded out of the sum (exact for power-of-two s_k; otherwise one fp32
// rounding of the product), as the two-pass kernel did. Output = s_v * (sum_j p_j code_j) / l.
// P is fp16 (finer than the bf16 kernel's bf16 P; p <= 1).
//
// Fragments straight from the bytes: the order of head_dim inside a k-step is free (Q and K use
// the same), so k-step ks = 4h + j of lane column c covers dims 16 (c + 4h) + 4j .. + 3 and a
// lane's K codes of a key are 16 contiguous bytes; for P V a lane's B fragment pairs two keys of
// one dim, so it loads its HD/8 contiguous dims of four keys (2c, 2c+1, 2c+8, 2c+9) and pairs
// the keys' bytes with a byte permute; O n-tile t, column n then holds dim (HD/8) n + t. The
// 16-byte chunks of the stage are XOR-swizzled (chunk_off) so both read patterns are free of
// bank conflicts.
template <int HD>
struct MmaE4m3Kv {
  static constexpr int kC = HD / 16;  // 16-byte chunks per key row
  static constexpr int kPageBytes = 16 * HD;
  static constexpr int kStageBytes = 2 * kPageBytes;
  static constexpr int kKs = HD / 16;
  static_assert(HD == 64 || HD == 128);
  struct Q {
    unsigned a[kKs][2];  // fp16 A fragments of 2^e q, rows 0-7
    float mul;           // scale * s_k * 2^-e
  };
  // Byte offset of chunk x of key row r in a K or V page of the stage. 128-byte lines: one row
  // (HD 128) or two (HD 64); the chunk's position in its line is XORed with s(r), which keeps
  // the 8 lanes of a 16-byte shared load (rows r, r + 1 for K; rows 2c for V) on 8 different
  // chunk positions, and the 16 lanes of HD 64's 8-byte V loads on 16 different 8-byte words.
  __device__ static int chunk_off(int r, int x) {
    const int i = r * kC + x;
    int s = ((r >> 1) & 3) << 1;
    if constexpr (kC == 8) s ^= (r & 1) << 2;
    return ((i >> 3) << 7) | (((i & 7) ^ s) << 4);
  }
  // First of the 4 head_dim indices of k-step ks in lane column qc.
  __device__ static int k_dim(int ks, int qc) { return 16 * (qc + 4 * (ks >> 2)) + 4 * (ks & 3); }
  __device__ static void load_q(const DecodeAttentionParams& p, int b, int g, int group, int qr,
                                int qc, Q& q) {
    const bf16* qrow =
        p.q + static_cast<long long>(p.q_row[b]) * p.q_stride + (g * group + qr) * HD;
    float v[kKs][4];
    float mx = 0.0f;
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
      const uint2 u =
          qr < group ? *reinterpret_cast<const uint2*>(qrow + k_dim(ks, qc)) : make_uint2(0, 0);
      const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.x));
      const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&u.y));
      v[ks][0] = lo.x, v[ks][1] = lo.y, v[ks][2] = hi.x, v[ks][3] = hi.y;
#pragma unroll
      for (int e = 0; e < 4; ++e) mx = fmaxf(mx, fabsf(v[ks][e]));
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));  // row qr: the quad's lanes
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    int e = 0;  // zero or non-finite rows: unscaled (inf and NaN stay what they are)
    if (mx > 0.0f && isfinite(mx)) {
      int ex;
      frexpf(mx, &ex);  // mx in [2^(ex-1), 2^ex)
      e = min(max(15 - ex, -100), 100);
    }
    const float up = __int_as_float((127 + e) << 23), down = __int_as_float((127 - e) << 23);
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
      q.a[ks][0] = mma::pack_f16(v[ks][0] * up, v[ks][1] * up);
      q.a[ks][1] = mma::pack_f16(v[ks][2] * up, v[ks][3] * up);
    }
    q.mul = p.scale * p.kv_scales[g * 2] * down;
  }
  __device__ static void issue(const DecodeAttentionParams& p, unsigned char* dst, long long page,
                               int g, int key0, int k1, int lane) {
    constexpr int kLoads = 2 * 16 * kC / 32;  // cp.async per lane per page (K and V)
    const std::uint8_t* src =
        p.kv_pool8 + page * p.page_elems + static_cast<long long>(g) * 16 * HD;
    const long long half = p.page_elems / 2;
#pragma unroll
    for (int c = 0; c < kLoads; ++c) {
      const int chunk = lane + c * 32, part = chunk / (16 * kC);
      const int row = (chunk / kC) % 16, x = chunk % kC;
      const bool ok = key0 + row < k1;
      async::cp_async16(dst + part * kPageBytes + chunk_off(row, x),
                        ok ? src + part * half + row * HD + x * 16 : p.kv_pool8, ok);
    }
  }
  __device__ static void scores(float (&s)[2][4], const Q& q, const unsigned char* stage,
                                int lane) {
    const int qr = lane >> 2, qc = lane & 3;
#pragma unroll
    for (int h = 0; h < HD / 64; ++h)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {  // n-tile nt: key qr + 8 nt
        const uint4 w = *reinterpret_cast<const uint4*>(stage + chunk_off(qr + 8 * nt, qc + 4 * h));
        const unsigned word[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int ks = 4 * h + j;
          const unsigned a[4] = {q.a[ks][0], 0u, q.a[ks][1], 0u};
          mma::mma_f16(s[nt], a, mma::e4m3x2_to_f16x2(static_cast<unsigned short>(word[j])),
                       mma::e4m3x2_to_f16x2(static_cast<unsigned short>(word[j] >> 16)));
        }
      }
  }
  __device__ static unsigned pack_p(float lo, float hi) {
    return mma::pack_f16(lo, hi);
  }
  __device__ static void accumulate(float (&o)[HD / 8][4], const unsigned (&pa)[4],
                                    const unsigned char* stage, int lane) {
    constexpr int kWords = HD / 32;  // 32-bit words of a lane's HD / 8 dims of one key
    const int qr = lane >> 2, qc = lane & 3;
    const unsigned char* sv = stage + kPageBytes;
    const int d0 = (HD / 8) * qr;  // this lane's dims d0 .. d0 + HD/8 - 1 (B column n = qr)
    unsigned w[4][kWords];         // keys 2qc, 2qc + 1, 2qc + 8, 2qc + 9
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int key = 2 * qc + (k & 1) + 8 * (k >> 1);
      const unsigned char* src = sv + chunk_off(key, d0 / 16) + d0 % 16;
      if constexpr (kWords == 4) {
        const uint4 u = *reinterpret_cast<const uint4*>(src);
        w[k][0] = u.x, w[k][1] = u.y, w[k][2] = u.z, w[k][3] = u.w;
      } else {
        const uint2 u = *reinterpret_cast<const uint2*>(src);
        w[k][0] = u.x, w[k][1] = u.y;
      }
    }
#pragma unroll
    for (int i = 0; i < kWords; ++i) {
      // Bytes t of keys (2qc, 2qc + 1) and of (2qc + 8, 2qc + 9) side by side: dims 4i .. 4i + 3.
      const unsigned lo01 = __byte_perm(w[0][i], w[1][i], 0x5140);
      const unsigned hi01 = __byte_perm(w[0][i], w[1][i], 0x7362);
      const unsigned lo23 = __byte_perm(w[2][i], w[3][i], 0x5140);
      const unsigned hi23 = __byte_perm(w[2][i], w[3][i], 0x7362);
      const unsigned pairs01[2] = {lo01, hi01}, pairs23[2] = {lo23, hi23};
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const unsigned x01 = pairs01[t >> 1], x23 = pairs23[t >> 1];
        const int sh = (t & 1) * 16;
        mma::mma_f16(o[4 * i + t], pa, mma::e4m3x2_to_f16x2(static_cast<unsigned short>(x01 >> sh)),
                     mma::e4m3x2_to_f16x2(static_cast<unsigned short>(x23 >> sh)));
      }
    }
  }
  __device__ static int o_dim(int t, int qc, int e) {
    return (HD / 8) * (2 * qc + e) + t;
  }
};

template <int HD, bool kKv8>
using MmaKv = std::conditional_t<kKv8, MmaE4m3Kv<HD>, MmaBf16Kv<HD>>;

template <int HD, bool kKv8>
constexpr int mma_smem_bytes(int warps, int stages) {
  const int pipe = warps * stages * MmaKv<HD, kKv8>::kStageBytes;
  const int merge = warps * 8 * (HD + 2) * 4;
  return pipe > merge ? pipe : merge;
}

// The in-kernel score update's shared memory after the ring / merge region: the kept logits,
// [group][upd_stride(cols)] fp32 (rows rounded up to 16 bytes, then padded by 8 floats so the
// four rows' 32-byte writes of one instruction fall on different banks), then the group's LSE
// (8 floats).
__host__ __device__ constexpr int upd_stride(int cols) {
  return (cols + 3) / 4 * 4 + 8;  // 16-byte rows (float2 stores at even columns), + 8 banks
}
__host__ __device__ constexpr int upd_smem_bytes(int group, int cols) {
  return cols > 0 ? (group * upd_stride(cols) + 8) * 4 : 0;
}

template <int HD, int W, int S, bool kKv8>
__global__ void __launch_bounds__(W * 32)
    decode_attention_mma_kernel(const DecodeAttentionParams p) {
  using Kv = MmaKv<HD, kKv8>;
  constexpr int kDt = HD / 8;  // O n-tiles
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  extern __shared__ uint4 smem_raw[];
  const int b = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int qr = lane >> 2, qc = lane & 3;  // fragment row (query head) and column pair
  unsigned char* const ring =
      reinterpret_cast<unsigned char*>(smem_raw) + warp * S * Kv::kStageBytes;
  const KeyRange keys = split_keys(p, b, split);
  const int k0 = keys.k0, k1 = keys.k1;
  const int page0 = k0 >> 4, npages = (k1 - k0 + 15) >> 4;
  const int mine = npages > warp ? (npages - warp + W - 1) / W : 0;  // this warp's pages
  // The in-kernel score update (one split only: decode_attention_updates_scores).
  const bool upd = p.upd_seqs != nullptr;
  float* const stash = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(smem_raw) +
                                                mma_smem_bytes<HD, kKv8>(W, S));
  float* const stash_lse = stash + group * upd_stride(p.upd_cols);

  const int* table = p.block_table + static_cast<long long>(b) * p.table_stride + page0;
  int next_page = mine > 0 ? table[warp] : 0;  // pool page of this warp's next page to issue
  auto issue = [&](int i) {                    // this warp's i-th page into stage i % S
    Kv::issue(p, ring + (i % S) * Kv::kStageBytes, next_page, g, k0 + (warp + i * W) * 16, k1,
              lane);
    if (i + 1 < mine) next_page = table[warp + (i + 1) * W];  // used by the next issue
  };
  // The first S - 1 pages are requested before q is loaded: q's round trip (and its scaling,
  // which waits for it) then overlaps theirs instead of delaying every block's first KV bytes
  // (a short block, 8 pages per warp at 512 slots, pays its start once per 256 KB).
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < mine) issue(i);
    async::cp_async_commit();
  }
  typename Kv::Q q;
  Kv::load_q(p, b, g, group, qr, qc, q);
  const float scale_log2 = q.mul * kLog2e;
  float o[kDt][4];
#pragma unroll
  for (int d = 0; d < kDt; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // row qr, log2 units; l: this lane's columns only
  for (int i = 0; i < mine; ++i) {
    async::cp_async_wait<S - 2>();
    __syncwarp();  // page i landed for every lane; page i - 1's stage is free again
    if (i + S - 1 < mine) issue(i + S - 1);
    async::cp_async_commit();
    const unsigned char* stage = ring + (i % S) * Kv::kStageBytes;
    const int key0 = k0 + (warp + i * W) * 16;
    // S = Q K^T for the page's 16 keys: two n-tiles (keys 0-7, 8-15).
    float s[2][4] = {};
    Kv::scores(s, q, stage, lane);
    // Row qr's four logits of this lane (keys nt * 8 + 2 qc + e): mask, write, page maximum.
    if (upd && qr < group) {  // kept for the in-kernel score update (same values as below)
      float* const lrow = stash + qr * upd_stride(p.upd_cols);
      const int lim = min(k1, p.upd_cols);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int j = key0 + nt * 8 + 2 * qc;  // even: key0 is a multiple of 16
        const float2 v = make_float2(s[nt][0] * q.mul, s[nt][1] * q.mul);
        if (j + 1 < lim) {
          *reinterpret_cast<float2*>(lrow + j) = v;
        } else if (j < lim) {
          lrow[j] = v.x;
        }
      }
    } else if (p.logits && qr < group) {  // streaming stores (read once, by the score update)
      float* const lrow =
          p.logits + (static_cast<long long>(b) * p.heads + g * group + qr) * p.logits_stride;
      const int lim = min(k1, p.logits_stride);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int j = key0 + nt * 8 + 2 * qc;  // even: key0 is a multiple of 16
        const float2 v = make_float2(s[nt][0] * q.mul, s[nt][1] * q.mul);
        if (j + 1 < lim && (reinterpret_cast<std::uintptr_t>(lrow + j) & 7) == 0) {
          __stcs(reinterpret_cast<float2*>(lrow + j), v);
        } else {
          if (j < lim) __stcs(lrow + j, v.x);
          if (j + 1 < lim) __stcs(lrow + j + 1, v.y);
        }
      }
    }
    float mt = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = key0 + nt * 8 + 2 * qc + e;
        s[nt][e] = j < k1 ? s[nt][e] * scale_log2 : -INFINITY;
        mt = fmaxf(mt, s[nt][e]);
      }
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
    mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 2));
    const float m_new = fmaxf(m, mt);
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a fully masked page: p = 0
    const float alpha = mma::fast_exp2(m - m_use);          // m = -inf: 0
    m = m_new;
    l *= alpha;
#pragma unroll
    for (int d = 0; d < kDt; ++d) o[d][0] *= alpha, o[d][1] *= alpha;
    unsigned pa[4];
    {
      const float p00 = mma::fast_exp2(s[0][0] - m_use), p01 = mma::fast_exp2(s[0][1] - m_use);
      const float p10 = mma::fast_exp2(s[1][0] - m_use), p11 = mma::fast_exp2(s[1][1] - m_use);
      l += (p00 + p01) + (p10 + p11);
      pa[0] = Kv::pack_p(p00, p01), pa[1] = 0u;
      pa[2] = Kv::pack_p(p10, p11), pa[3] = 0u;
    }
    Kv::accumulate(o, pa, stage, lane);  // O += P V
  }
  async::cp_async_wait<0>();
  l += __shfl_xor_sync(0xffffffffu, l, 1);  // row qr's sum over the quad, fixed order
  l += __shfl_xor_sync(0xffffffffu, l, 2);
  __syncthreads();  // every warp is done with its ring: the merge reuses the memory

  float* const sM = reinterpret_cast<float*>(smem_raw);  // [W][8]
  float* const sL = sM + W * 8;                          // [W][8]
  float* const sO = sL + W * 8;                          // [W][8][HD]
  if (qr < group) {
    if (qc == 0) sM[warp * 8 + qr] = m, sL[warp * 8 + qr] = l;
#pragma unroll
    for (int d = 0; d < kDt; ++d) {
      sO[(warp * 8 + qr) * HD + Kv::o_dim(d, qc, 0)] = o[d][0];
      sO[(warp * 8 + qr) * HD + Kv::o_dim(d, qc, 1)] = o[d][1];
    }
  }
  // The in-kernel update's first kUpdAhead scores of this thread, loaded now (the accumulators
  // are dead) so that their latency overlaps the merge instead of ending the block.
  constexpr int kUpdAhead = 4;
  float sc_ahead[kUpdAhead];
  // The row's rule (sparse_common.cuh); full layers and padding (policy 0) update nothing, and
  // no row reads past its attended keys or the kept columns.
  sparse::detail::DecodeUpdateRow ur{};
  const sparse::DecodeSeq* const sq = upd ? p.upd_seqs + b : nullptr;
  if (upd) {
    if (sq->policy != 0) ur = sparse::detail::decode_update_row(*sq);
    ur.attended = min(ur.attended, min(k1, p.upd_cols));
#pragma unroll
    for (int k = 0; k < kUpdAhead; ++k) {
      const int j = threadIdx.x + k * W * 32;
      sc_ahead[k] =
          j < ur.attended
              ? p.upd_scores[sparse::detail::score_elem(p.upd_pages + sq->table, p.kv_heads, g, j)]
              : 0.0f;
    }
  }
  __syncthreads();
  // e4m3: the V scale, folded out of the sums (bf16: nothing).
  const float v_scale = kKv8 ? p.kv_scales[g * 2 + 1] : 1.0f;
  for (int i = threadIdx.x; i < group * HD; i += W * 32) {
    const int hh = i / HD, d = i % HD;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, sM[w * 8 + hh]);
    float acc = 0.0f, lsum = 0.0f;
    if (mx != -INFINITY)
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float mw = sM[w * 8 + hh];
        if (mw == -INFINITY) continue;
        const float c = mma::fast_exp2(mw - mx);
        acc += sO[(w * 8 + hh) * HD + d] * c;
        lsum += sL[w * 8 + hh] * c;
      }
    if constexpr (kKv8) acc *= v_scale;
    const float m_nat = mx == -INFINITY ? -INFINITY : mx * kLn2;  // natural log, as merged
    if (p.num_splits == 1) {  // the final result: the same arithmetic as the merge kernel's
      const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
      p.out[static_cast<long long>(p.q_row[b]) * p.out_stride + (g * group + hh) * HD + d] =
          __float2bfloat16_rn(acc * inv);
      if (d == 0) {
        const float lse = lsum > 0.0f ? m_nat + logf(lsum) : -INFINITY;
        if (p.lse) p.lse[static_cast<long long>(b) * p.heads + g * group + hh] = lse;
        if (upd) stash_lse[hh] = lse;
      }
      continue;
    }
    const long long idx =
        (static_cast<long long>(b) * p.heads + g * group + hh) * p.num_splits + split;
    p.part_o[idx * HD + d] = acc;
    if (d == 0) {
      p.part_ml[idx * 2] = m_nat;
      p.part_ml[idx * 2 + 1] = lsum;
    }
  }
  if (!upd) return;
  // The score update of sparse::launch_scored_update from the kept logits (its arithmetic and
  // order: the group's heads summed in index order, expf of logit - LSE).
  __syncthreads();  // stash_lse written above; every warp's logits stashed before the merge
  const std::int32_t* const stable = p.upd_pages + sq->table;
  const int stride = upd_stride(p.upd_cols);
  auto update = [&](int j, float old) {
    float prob = 0.0f;
    for (int h = 0; h < group; ++h)
      prob = sparse::detail::add_head_prob(prob, stash[h * stride + j], stash_lse[h]);
    const std::size_t e = sparse::detail::score_elem(stable, p.kv_heads, g, j);
    p.upd_scores[e] = sparse::detail::updated_score(ur, j, old, prob);
    if (p.upd_positions && j == ur.new_slot) p.upd_positions[e] = sq->position;
  };
#pragma unroll
  for (int k = 0; k < kUpdAhead; ++k) {
    const int j = threadIdx.x + k * W * 32;
    if (j < ur.attended) update(j, sc_ahead[k]);
  }
  for (int j = threadIdx.x + kUpdAhead * W * 32; j < ur.attended; j += W * 32)
    update(j, p.upd_scores[sparse::detail::score_elem(stable, p.kv_heads, g, j)]);
}

template <int HD, int W, int S, bool kKv8>
void launch_mma(const DecodeAttentionParams& p, cudaStream_t s) {
  const int bytes = mma_smem_bytes<HD, kKv8>(W, S) +
                    (p.upd_seqs ? upd_smem_bytes(p.heads / p.kv_heads, p.upd_cols) : 0);
  // Set on every launch: cheap, per device, and safe from several rank threads.
  CUDA_CHECK(cudaFuncSetAttribute(decode_attention_mma_kernel<HD, W, S, kKv8>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  decode_attention_mma_kernel<HD, W, S, kKv8>
      <<<dim3(p.batch, p.kv_heads, p.num_splits), W * 32, bytes, s>>>(p);
}

// mma_shape -> (warps per block, stages per warp), f(integral_constant W, integral_constant S).
// bf16 (8,704-byte stages at hd 128): (4, 3), (2, 3), (4, 2), (2, 4), (4, 4). e4m3 stages are
// half the bytes, so the default takes 5 stages: 4 pages of 4 KiB in flight per warp = the bf16
// default's 2 of 8 KiB (and 2 blocks per SM, 80 KiB each), then (2, 5), (4, 3), (4, 4) (3 blocks
// per SM), (8, 3).
template <bool kKv8, class F>
void with_mma_shape(int shape, F&& f) {
  using std::integral_constant;
  if constexpr (kKv8) {
    switch (shape) {
      case 0:
        return f(integral_constant<int, 4>{}, integral_constant<int, 5>{});
      case 1:
        return f(integral_constant<int, 2>{}, integral_constant<int, 5>{});
      case 2:
        return f(integral_constant<int, 4>{}, integral_constant<int, 3>{});
      case 3:
        return f(integral_constant<int, 4>{}, integral_constant<int, 4>{});
      default:
        return f(integral_constant<int, 8>{}, integral_constant<int, 3>{});
    }
  } else {
    switch (shape) {
      case 0:
        return f(integral_constant<int, 4>{}, integral_constant<int, 3>{});
      case 1:
        return f(integral_constant<int, 2>{}, integral_constant<int, 3>{});
      case 2:
        return f(integral_constant<int, 4>{}, integral_constant<int, 2>{});
      case 3:
        return f(integral_constant<int, 2>{}, integral_constant<int, 4>{});
      default:
        return f(integral_constant<int, 4>{}, integral_constant<int, 4>{});
    }
  }
}

template <int HD, bool kKv8>
void launch_mma_shape(const DecodeAttentionParams& p, cudaStream_t s) {
  with_mma_shape<kKv8>(p.mma_shape, [&](auto w, auto st) {
    launch_mma<HD, decltype(w)::value, decltype(st)::value, kKv8>(p, s);
  });
}

// The split-KV merge: one block per (row, head). The splits' (m, l) are staged in shared memory
// by all threads at once, and each output element's loads over the splits are issued kAhead at a
// time before their additions: the arithmetic and its order are the serial loop's (max over s;
// l and o summed over s = 0, 1, ... skipping empty splits), so the bits are too, but one launch
// no longer waits one L2 round trip per split three times over (Nsight Compute at batch 1,
// context 4096, 32 splits: 10.8 us per launch, 0.35 ms of a 4.7 ms token; thirteenth session).
template <int HD>
__global__ void decode_merge_kernel(const DecodeAttentionParams p) {
  __shared__ float sm_m[kMaxDecodeSplits], sm_l[kMaxDecodeSplits], sm_e[kMaxDecodeSplits];
  const int b = blockIdx.x, h = blockIdx.y, S = p.num_splits;
  const long long base = (static_cast<long long>(b) * p.heads + h) * S;
  for (int s = threadIdx.x; s < S; s += blockDim.x) {
    sm_m[s] = p.part_ml[(base + s) * 2];
    sm_l[s] = p.part_ml[(base + s) * 2 + 1];
  }
  __syncthreads();
  float m = -INFINITY;
  for (int s = 0; s < S; ++s) m = fmaxf(m, sm_m[s]);
  for (int s = threadIdx.x; s < S; s += blockDim.x)
    sm_e[s] = sm_m[s] != -INFINITY ? __expf(sm_m[s] - m) : 0.0f;
  __syncthreads();
  float l = 0.0f;
  for (int s = 0; s < S; ++s)
    if (sm_m[s] != -INFINITY) l += sm_l[s] * sm_e[s];
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  bf16* out = p.out + static_cast<long long>(p.q_row[b]) * p.out_stride + h * HD;
  constexpr int kAhead = 16;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float o = 0.0f;
    for (int s0 = 0; s0 < S; s0 += kAhead) {
      float v[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        v[j] = s0 + j < S && sm_m[s0 + j] != -INFINITY ? p.part_o[(base + s0 + j) * HD + d] : 0.0f;
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (s0 + j < S && sm_m[s0 + j] != -INFINITY) o += v[j] * sm_e[s0 + j];
    }
    out[d] = __float2bfloat16_rn(o * inv);
  }
  if (p.lse && threadIdx.x == 0)
    p.lse[static_cast<long long>(b) * p.heads + h] = l > 0.0f ? m + logf(l) : -INFINITY;
}

}  // namespace

int decode_kernel_from_env() {
  static const int k = [] {
    const char* v = std::getenv("STRATA_DECODE_ATTN");
    const std::string s = v ? v : "";
    if (s.empty()) return static_cast<int>(kDefaultDecodeKernel);
    if (s == "two_pass") return static_cast<int>(kDecodeTwoPass);
    if (s == "pipelined") return static_cast<int>(kDecodePipelined);
    if (s == "mma") return static_cast<int>(kDecodeMma);
    throw ConfigError("STRATA_DECODE_ATTN", "decode attention kernel '" + s +
                                                "' is not one of: two_pass, pipelined, mma");
  }();
  return k;
}

namespace {
// Whether the launch of p runs the tensor-core kernel: on e4m3 pages unless `kernel` asks for
// the two-pass kernel (an A/B comparison; the pipelined kernel reads bf16 only), on bf16 pages
// when `kernel` resolves to kDecodeMma.
bool runs_mma(const DecodeAttentionParams& p) {
  const int kernel = p.kernel == kDecodeDefault ? decode_kernel_from_env() : p.kernel;
  return p.kv_pool8 ? kernel != kDecodeTwoPass : kernel == kDecodeMma;
}
}  // namespace

bool decode_attention_updates_scores(const DecodeAttentionParams& p, int upd_cols) {
  if (!runs_mma(p) || p.num_splits != 1 || upd_cols <= 0 || p.kv_heads <= 0 ||
      p.heads % p.kv_heads != 0 || p.heads / p.kv_heads > kMaxGroup || p.mma_shape < 0 ||
      p.mma_shape > 4 || (p.head_dim != 64 && p.head_dim != 128))
    return false;
  int base = 0;  // the launch's shared memory without the kept logits
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, "decode attention", HD, {
    auto bytes = [&]<bool kKv8>() {
      with_mma_shape<kKv8>(p.mma_shape, [&](auto w, auto st) {
        base = mma_smem_bytes<HD, kKv8>(decltype(w)::value, decltype(st)::value);
      });
    };
    if (p.kv_pool8)
      bytes.template operator()<true>();
    else
      bytes.template operator()<false>();
  });
  const long long extra = upd_smem_bytes(p.heads / p.kv_heads, upd_cols);
  int dev = 0, per_sm = 0, reserved = 0, per_block = 0;
  CUDA_CHECK(cudaGetDevice(&dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
  CUDA_CHECK(cudaDeviceGetAttribute(&per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  if (base + extra > per_block) return false;
  return per_sm / (base + reserved) == per_sm / (base + extra + reserved);
}

void launch_decode_attention(const DecodeAttentionParams& p, cudaStream_t s) {
  if (p.batch == 0) return;
  if (p.upd_seqs && (p.logits || !p.upd_pages || !p.upd_scores ||
                     !decode_attention_updates_scores(p, p.upd_cols)))
    throw InternalError(
        "decode attention: the in-kernel score update does not apply here "
        "(decode_attention_updates_scores)");
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.heads / p.kv_heads > kMaxGroup)
    throw ConfigError("num_key_value_heads",
                      "decode attention: heads/kv_heads must be an integer <= " +
                          std::to_string(kMaxGroup) + " (heads " + std::to_string(p.heads) +
                          ", kv_heads " + std::to_string(p.kv_heads) + ")");
  if (p.unroll != 0 && p.unroll != 4 && p.unroll != 8)
    throw InternalError("decode attention: unroll " + std::to_string(p.unroll) +
                        " (supported: 0, 4, 8)");
  if (p.num_splits < 1 || p.num_splits > kMaxDecodeSplits)
    throw InternalError("decode attention: num_splits " + std::to_string(p.num_splits) +
                        " outside 1.." + std::to_string(kMaxDecodeSplits));
  const int kernel = p.kernel == kDecodeDefault ? decode_kernel_from_env() : p.kernel;
  if (kernel != kDecodeTwoPass && kernel != kDecodePipelined && kernel != kDecodeMma)
    throw InternalError("decode attention: kernel " + std::to_string(p.kernel) +
                        " (supported: 0 default, 1 two-pass, 2 pipelined, 3 mma)");
  if (p.mma_shape < 0 || p.mma_shape > 4)
    throw InternalError("decode attention: mma_shape " + std::to_string(p.mma_shape) +
                        " (supported: 0..4)");
  if (p.kv_pool8 && !p.kv_scales)
    throw InternalError("decode attention: an e4m3 pool (kv_pool8) needs kv_scales");
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, "decode attention", HD, {
    const dim3 grid(p.batch, p.kv_heads, p.num_splits);
    // FP8 KV (docs/kv-fp8.md): the tensor-core kernel on e4m3 pages, or the two-pass kernel when
    // `kernel` asks for it (runs_mma).
    const bool tensor_cores = runs_mma(p);
    if (p.kv_pool8 && !tensor_cores) {
      if (p.heads / p.kv_heads <= 4)
        decode_attention_kernel<HD, 4, 8, true><<<grid, kThreads, 0, s>>>(p);
      else
        decode_attention_kernel<HD, 8, 8, true><<<grid, kThreads, 0, s>>>(p);
      CUDA_CHECK_LAUNCH();
      decode_merge_kernel<HD><<<dim3(p.batch, p.heads), 128, 0, s>>>(p);
      CUDA_CHECK_LAUNCH();
      return;
    }
    if (tensor_cores) {
      if (p.kv_pool8)
        launch_mma_shape<HD, true>(p, s);
      else
        launch_mma_shape<HD, false>(p, s);
      CUDA_CHECK_LAUNCH();
      if (p.num_splits > 1) {  // one split: the kernel wrote the output and LSE itself
        decode_merge_kernel<HD><<<dim3(p.batch, p.heads), 128, 0, s>>>(p);
        CUDA_CHECK_LAUNCH();
      }
      return;
    }
    if (kernel == kDecodePipelined) {
      if (p.heads / p.kv_heads <= 4)
        decode_attention_pipelined_kernel<HD, 4>
            <<<grid, kThreads, pipelined_smem_bytes<HD, 4>(), s>>>(p);
      else
        decode_attention_pipelined_kernel<HD, 8>
            <<<grid, kThreads, pipelined_smem_bytes<HD, 8>(), s>>>(p);
      CUDA_CHECK_LAUNCH();
      decode_merge_kernel<HD><<<dim3(p.batch, p.heads), 128, 0, s>>>(p);
      CUDA_CHECK_LAUNCH();
      return;
    }
    // unroll: keys in flight per thread (memory-level parallelism); 0 = default 4.
    const bool u8 = p.unroll == 8;
    if (p.heads / p.kv_heads <= 4) {
      if (u8)
        decode_attention_kernel<HD, 4, 8, false><<<grid, kThreads, 0, s>>>(p);
      else
        decode_attention_kernel<HD, 4, 4, false><<<grid, kThreads, 0, s>>>(p);
    } else {
      if (u8)
        decode_attention_kernel<HD, 8, 8, false><<<grid, kThreads, 0, s>>>(p);
      else
        decode_attention_kernel<HD, 8, 4, false><<<grid, kThreads, 0, s>>>(p);
    }
    CUDA_CHECK_LAUNCH();
    decode_merge_kernel<HD><<<dim3(p.batch, p.heads), 128, 0, s>>>(p);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace strata::cuda
