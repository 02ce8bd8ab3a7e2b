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

#include "cuda/attention.h"
#include "cuda/cp_async.cuh"
#include "cuda/cuda_check.h"
#include "cuda/dispatch.h"
#include "cuda/mma.cuh"
#include "cuda/prefill_frag.h"

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
// S = Q K^T and O += P V run as mma.sync m16n8k16 (bf16 in, fp32 accumulate): no per-element
// FMAs or shuffle reductions of dot products, which bounded the CUDA-core kernels. Each warp
// owns whole pages: warp w of a block takes pages w, w + W, w + 2W, ... of the split's key range
// and streams them through its own S-stage cp.async ring (K and V of a page, 16 keys, together;
// rows padded by 8 bf16 so ldmatrix is bank-conflict free), so warps never wait on each other;
// the next page's id is read one page ahead, off the copy's critical path. Keys past the split's
// end are zero-filled (V too: 0 x NaN in a poisoned tail would be NaN) and masked to -inf. Each
// warp keeps an online softmax (log2 domain) per query head; P is rounded to bf16 for P V, as
// in the FA2 prefill kernel. At the end the W warps are merged in index order (deterministic).
template <int HD>
struct MmaDecodeSmem {
  static constexpr int kLd = HD + 8;           // bf16 per padded row
  static constexpr int kPageElems = 16 * kLd;  // one K (or V) page of one kv head
  static constexpr int kStageElems = 2 * kPageElems;
  static constexpr int bytes(int warps, int stages) {
    const int pipe = warps * stages * kStageElems * 2;
    const int merge = warps * 8 * (HD + 2) * 4;
    return pipe > merge ? pipe : merge;
  }
};

template <int HD, int W, int S>
__global__ void __launch_bounds__(W * 32)
    decode_attention_mma_kernel(const DecodeAttentionParams p) {
  using L = MmaDecodeSmem<HD>;
  constexpr int kLd = L::kLd;
  constexpr int kLpk = HD / 8;                // 16-byte chunks per key row
  constexpr int kLoads = 2 * 16 * kLpk / 32;  // cp.async per lane per page (K and V)
  constexpr int kKs = HD / 16;                // k-steps of Q K^T
  constexpr int kDt = HD / 8;                 // O n-tiles
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  extern __shared__ uint4 smem_raw[];
  const int b = blockIdx.x, g = blockIdx.y, split = blockIdx.z;
  const int group = p.heads / p.kv_heads;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int qr = lane >> 2, qc = lane & 3;  // fragment row (query head) and column pair
  bf16* const ring = reinterpret_cast<bf16*>(smem_raw) + warp * S * L::kStageElems;
  const KeyRange keys = split_keys(p, b, split);
  const int k0 = keys.k0, k1 = keys.k1;
  const int page0 = k0 >> 4, npages = (k1 - k0 + 15) >> 4;
  const int mine = npages > warp ? (npages - warp + W - 1) / W : 0;  // this warp's pages
  const float scale_log2 = p.scale * kLog2e;

  // Q as A fragments: row qr = query head g * group + qr (rows >= group and 8..15 are zero).
  unsigned qa[kKs][2];
  {
    const bf16* qrow =
        p.q + static_cast<long long>(p.q_row[b]) * p.q_stride + (g * group + qr) * HD + 2 * qc;
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
      qa[ks][0] = qr < group ? *reinterpret_cast<const unsigned*>(qrow + ks * 16) : 0u;
      qa[ks][1] = qr < group ? *reinterpret_cast<const unsigned*>(qrow + ks * 16 + 8) : 0u;
    }
  }
  float o[kDt][4];
#pragma unroll
  for (int d = 0; d < kDt; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // row qr, log2 units; l: this lane's columns only

  const int* table = p.block_table + static_cast<long long>(b) * p.table_stride + page0;
  const long long half = p.page_elems / 2;
  int next_page = mine > 0 ? table[warp] : 0;  // pool page of this warp's next page to issue
  auto issue = [&](int i) {                    // this warp's i-th page into stage i % S
    bf16* const dst = ring + (i % S) * L::kStageElems;
    const int key0 = k0 + (warp + i * W) * 16;
    const bf16* src = p.kv_pool + static_cast<long long>(next_page) * p.page_elems +
                      static_cast<long long>(g) * 16 * HD;
#pragma unroll
    for (int c = 0; c < kLoads; ++c) {
      const int chunk = lane + c * 32, part = chunk / (16 * kLpk), cc = chunk % (16 * kLpk);
      const int key = cc / kLpk, s8 = cc % kLpk;
      const bool ok = key0 + key < k1;
      async::cp_async16(dst + part * L::kPageElems + key * kLd + s8 * 8,
                        ok ? src + part * half + key * HD + s8 * 8 : p.kv_pool, ok);
    }
    if (i + 1 < mine) next_page = table[warp + (i + 1) * W];  // used by the next issue
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < mine) issue(i);
    async::cp_async_commit();
  }
  for (int i = 0; i < mine; ++i) {
    async::cp_async_wait<S - 2>();
    __syncwarp();  // page i landed for every lane; page i - 1's stage is free again
    if (i + S - 1 < mine) issue(i + S - 1);
    async::cp_async_commit();
    const bf16* sk = ring + (i % S) * L::kStageElems;
    const bf16* sv = sk + L::kPageElems;
    const int key0 = k0 + (warp + i * W) * 16;
    // S = Q K^T for the page's 16 keys: two n-tiles (keys 0-7, 8-15).
    float s[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < kKs; ++ks) {
      unsigned kb[4];
      mma::ldmatrix_x4(kb, sk + frag::b_row(lane) * kLd + ks * 16 + frag::b_col(lane));
      const unsigned a[4] = {qa[ks][0], 0u, qa[ks][1], 0u};
      mma::mma_bf16(s[0], a, kb[0], kb[1]);
      mma::mma_bf16(s[1], a, kb[2], kb[3]);
    }
    // Row qr's four logits of this lane (keys nt * 8 + 2 qc + e): mask, write, page maximum.
    if (p.logits && qr < group) {  // streaming stores (read once, by the score update)
      float* const lrow =
          p.logits + (static_cast<long long>(b) * p.heads + g * group + qr) * p.logits_stride;
      const int lim = min(k1, p.logits_stride);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int j = key0 + nt * 8 + 2 * qc;  // even: key0 is a multiple of 16
        const float2 v = make_float2(s[nt][0] * p.scale, s[nt][1] * p.scale);
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
      pa[0] = mma::pack_bf16(p00, p01), pa[1] = 0u;
      pa[2] = mma::pack_bf16(p10, p11), pa[3] = 0u;
    }
    // O += P V: V via ldmatrix.trans, two O n-tiles (16 dims) per load.
#pragma unroll
    for (int dp = 0; dp < HD / 16; ++dp) {
      unsigned vb[4];
      mma::ldmatrix_x4_trans(vb, sv + frag::a_row(lane) * kLd + dp * 16 + frag::a_col(lane));
      mma::mma_bf16(o[2 * dp], pa, vb[0], vb[1]);
      mma::mma_bf16(o[2 * dp + 1], pa, vb[2], vb[3]);
    }
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
      sO[(warp * 8 + qr) * HD + d * 8 + 2 * qc] = o[d][0];
      sO[(warp * 8 + qr) * HD + d * 8 + 2 * qc + 1] = o[d][1];
    }
  }
  __syncthreads();
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
    const float m_nat = mx == -INFINITY ? -INFINITY : mx * kLn2;  // natural log, as merged
    if (p.num_splits == 1) {  // the final result: the same arithmetic as the merge kernel's
      const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
      p.out[static_cast<long long>(p.q_row[b]) * p.out_stride + (g * group + hh) * HD + d] =
          __float2bfloat16_rn(acc * inv);
      if (p.lse && d == 0)
        p.lse[static_cast<long long>(b) * p.heads + g * group + hh] =
            lsum > 0.0f ? m_nat + logf(lsum) : -INFINITY;
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
}

template <int HD, int W, int S>
void launch_mma(const DecodeAttentionParams& p, cudaStream_t s) {
  constexpr int bytes = MmaDecodeSmem<HD>::bytes(W, S);
  // Set on every launch: cheap, per device, and safe from several rank threads.
  CUDA_CHECK(cudaFuncSetAttribute(decode_attention_mma_kernel<HD, W, S>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  decode_attention_mma_kernel<HD, W, S>
      <<<dim3(p.batch, p.kv_heads, p.num_splits), W * 32, bytes, s>>>(p);
}

template <int HD>
__global__ void decode_merge_kernel(const DecodeAttentionParams p) {
  const int b = blockIdx.x, h = blockIdx.y;
  const long long base = (static_cast<long long>(b) * p.heads + h) * p.num_splits;
  float m = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s) m = fmaxf(m, p.part_ml[(base + s) * 2]);
  float l = 0.0f;
  for (int s = 0; s < p.num_splits; ++s) {
    const float ms = p.part_ml[(base + s) * 2];
    if (ms != -INFINITY) l += p.part_ml[(base + s) * 2 + 1] * __expf(ms - m);
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  bf16* out = p.out + static_cast<long long>(p.q_row[b]) * p.out_stride + h * HD;
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    float o = 0.0f;
    for (int s = 0; s < p.num_splits; ++s) {
      const float ms = p.part_ml[(base + s) * 2];
      if (ms != -INFINITY) o += p.part_o[(base + s) * HD + d] * __expf(ms - m);
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

void launch_decode_attention(const DecodeAttentionParams& p, cudaStream_t s) {
  if (p.batch == 0) return;
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
    if (p.kv_pool8) {  // FP8 KV: the two-pass kernel only, so far (docs/kv-fp8.md)
      if (p.heads / p.kv_heads <= 4)
        decode_attention_kernel<HD, 4, 8, true><<<grid, kThreads, 0, s>>>(p);
      else
        decode_attention_kernel<HD, 8, 8, true><<<grid, kThreads, 0, s>>>(p);
      CUDA_CHECK_LAUNCH();
      decode_merge_kernel<HD><<<dim3(p.batch, p.heads), 128, 0, s>>>(p);
      CUDA_CHECK_LAUNCH();
      return;
    }
    if (kernel == kDecodeMma) {
      switch (p.mma_shape) {  // (warps per block, pipeline stages per warp)
        case 0:
          launch_mma<HD, 4, 3>(p, s);
          break;
        case 1:
          launch_mma<HD, 2, 3>(p, s);
          break;
        case 2:
          launch_mma<HD, 4, 2>(p, s);
          break;
        case 3:
          launch_mma<HD, 2, 4>(p, s);
          break;
        default:
          launch_mma<HD, 4, 4>(p, s);
          break;
      }
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
