// Prefill attention, FlashAttention-2 style with register-resident fragments:
// mma.sync.aligned.m16n8k16 bf16 (inline PTX, fp32 accumulate), ldmatrix (.trans for V),
// cp.async double-buffered K/V tiles, online softmax in the log2 domain (exp2, the
// scale*log2(e) folded into one FMA), causal key tiles skipped, only tiles that reach past
// the tile's first query position masked. Same interface and LSE definition as the WMMA
// kernel (cuda/attention.h); index mapping of the fragments in cuda/prefill_frag.h.
//
// Block = one 64-query tile (the interface's tile list) x HPB query heads of one KV group,
// 4 warps:
//   HPB = 2 (group size even, e.g. Llama-3 32/8): 128 query rows per block share every K/V
//     tile load (GQA); each warp owns 32 rows (MT = 2 m16 tiles) of one head, so each K/V
//     fragment read from shared memory feeds two MMAs. Q is re-read from shared memory per
//     k-step (registers: O 128 + S 64 fp32 per thread).
//   HPB = 1 (odd group size): 64 rows, warps of 16 rows with Q fragments kept in registers.
// Shared memory (rows padded by 8 bf16 = 16 B so ldmatrix's 8 row addresses hit distinct
// banks): Q [HPB*64][HD+8] + 2 stages x (K, V) [64][HD+8]. HD=128, HPB=2: 34816 + 69632 =
// 104448 B -> 2 blocks (8 warps) per SM.
//
// FP8 KV (kKv8, PrefillAttentionParams::kv_pool8; docs/kv-fp8.md; not yet run on a GPU): the K/V
// tiles are read as e4m3 codes (8 bytes per 8 elements, plain loads instead of cp.async) and
// stored into the same bf16 shared-memory tiles converted exactly (e4m3 is a subset of bf16), so
// the MMAs are unchanged; the KV head's scales are folded out: the logits' scale becomes
// scale * s_k (softmax and LSE), the output is multiplied by s_v.
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "cuda/attention.h"
#include "cuda/attention_prefill_impl.h"
#include "cuda/cp_async.cuh"
#include "cuda/cuda_check.h"
#include "cuda/dispatch.h"
#include "cuda/mma.cuh"
#include "cuda/prefill_frag.h"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kBM = 64;  // query positions per tile (the interface's tile)
constexpr int kBN = 64;  // keys per K/V tile
constexpr int kThreads = 128;

using async::cp_async16;
using async::cp_async_commit;
using async::cp_async_wait;
using mma::fast_exp2;
using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::mma_bf16;
using mma::pack_bf16;

template <int HD, int HPB>
struct Fa2Smem {
  static constexpr int kLd = HD + 8;  // bf16 per padded row
  static constexpr int kQElems = HPB * kBM * kLd;
  static constexpr int kTileElems = kBN * kLd;  // one K (or V) tile
  static constexpr int kStages = 2;
  static constexpr size_t kBytes =
      sizeof(bf16) * (static_cast<size_t>(kQElems) + 2 * kStages * kTileElems);
};

// 8 e4m3 codes as 8 bf16 (exact): e4m3 -> fp16 -> fp32 -> bf16, each step exact.
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(const uint2& u) {
  const auto* c = reinterpret_cast<const __nv_fp8x2_storage_t*>(&u);
  uint4 out;
  unsigned* w = reinterpret_cast<unsigned*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(c[i], __NV_E4M3)));
    w[i] = pack_bf16(f.x, f.y);
  }
  return out;
}

template <int HD, int HPB, int MT, bool kKv8>
__global__ void __launch_bounds__(kThreads, 2)
    prefill_attention_fa2_kernel(const PrefillAttentionParams p) {
  using L = Fa2Smem<HD, HPB>;
  constexpr int kLd = L::kLd;
  constexpr int kRowsW = 16 * MT;              // query rows per warp
  constexpr int kWarpsPerHead = kBM / kRowsW;  // warps sharing one head's 64 rows
  static_assert(kWarpsPerHead * HPB * 32 == kThreads, "4 warps per block");
  static_assert((kBN * (HD / 8)) % kThreads == 0 && (HPB * kBM * (HD / 8)) % kThreads == 0);
  constexpr int kNT = kBN / 8;     // S n-tiles
  constexpr int kDT = HD / 8;      // O n-tiles
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  constexpr bool kQInRegs = MT == 1;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);
  bf16* sKV = sQ + L::kQElems;  // stage s: K at sKV + 2*s*kTileElems, V after it

  const int tile = p.num_tiles - 1 - static_cast<int>(blockIdx.x);  // heavy (late) tiles first
  const int h0 = static_cast<int>(blockIdx.y) * HPB;
  const int seq = p.tile_seq[tile], q0 = p.tile_q0[tile];
  const int nq = p.nq[seq], pos0 = p.q_pos0[seq], row0 = p.row_start[seq];
  const int g = h0 / (p.heads / p.kv_heads);
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const int hh = warp / kWarpsPerHead;               // head of this warp: h0 + hh
  const int wrow = (warp % kWarpsPerHead) * kRowsW;  // first tile row of this warp
  const int h = h0 + hh;

  const int last_q = min(q0 + kBM, nq) - 1;  // last valid query index of the tile
  const int kv_end = pos0 + last_q + 1;      // keys needed by the last valid row
  const int num_kv_tiles = (kv_end + kBN - 1) / kBN;
  const int diag = pos0 + q0;  // position of tile row 0: tiles with keys > diag are masked
  // fp8: the K scale folds into the logits' scale, the V scale into the output (1 for bf16).
  const float qk_scale = kKv8 ? p.scale * p.kv_scales[g * 2] : p.scale;
  const float v_scale = kKv8 ? p.kv_scales[g * 2 + 1] : 1.0f;
  const float scale_log2 = qk_scale * 1.4426950408889634f;
  const long long part = p.page_elems / 2;
  const int* table = p.block_table + static_cast<long long>(seq) * p.table_stride;

  // Q tile: HPB heads x 64 rows; rows past nq are zero.
#pragma unroll
  for (int it = 0; it < HPB * kBM * kChunks / kThreads; ++it) {
    const int i = tid + it * kThreads;
    const int r = i / kChunks, c = i % kChunks;
    const int hq = r / kBM, rl = r % kBM;
    const bool valid = q0 + rl < nq;
    const bf16* src =
        valid ? p.q + static_cast<long long>(row0 + q0 + rl) * p.q_stride + (h0 + hq) * HD + c * 8
              : p.q;
    cp_async16(sQ + r * kLd + c * 8, src, valid);
  }
  cp_async_commit();

  // K/V tile t into stage st: 64 keys of kv head g from the pages; keys >= kv_end are zero.
  auto load_kv = [&](int t, int st) {
    bf16* dK = sKV + 2 * st * L::kTileElems;
    bf16* dV = dK + L::kTileElems;
    const int kb = t * kBN;
#pragma unroll
    for (int it = 0; it < kBN * kChunks / kThreads; ++it) {
      const int i = tid + it * kThreads;
      const int r = i / kChunks, c = i % kChunks, j = kb + r;
      const bool valid = j < kv_end;
      const long long off = valid ? static_cast<long long>(table[j >> 4]) * p.page_elems +
                                        (static_cast<long long>(g) * 16 + (j & 15)) * HD + c * 8
                                  : 0;
      if constexpr (kKv8) {
        const uint4 zero = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(dK + r * kLd + c * 8) =
            valid ? e4m3x8_to_bf16x8(*reinterpret_cast<const uint2*>(p.kv_pool8 + off)) : zero;
        *reinterpret_cast<uint4*>(dV + r * kLd + c * 8) =
            valid ? e4m3x8_to_bf16x8(*reinterpret_cast<const uint2*>(p.kv_pool8 + off + part))
                  : zero;
      } else {
        const bf16* src = p.kv_pool + off;
        cp_async16(dK + r * kLd + c * 8, src, valid);
        cp_async16(dV + r * kLd + c * 8, valid ? src + part : p.kv_pool, valid);
      }
    }
  };
  load_kv(0, 0);
  cp_async_commit();

  // Per-lane ldmatrix offsets (prefill_frag.h).
  const int qa_off = (hh * kBM + wrow + frag::a_row(lane)) * kLd + frag::a_col(lane);
  const int kb_off = frag::b_row(lane) * kLd + frag::b_col(lane);
  const int va_off = frag::a_row(lane) * kLd + frag::a_col(lane);

  unsigned qf[kQInRegs ? HD / 16 : 1][4];
  if constexpr (kQInRegs) {
    cp_async_wait<1>();  // the Q group
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) ldmatrix_x4(qf[ks], sQ + qa_off + ks * 16);
  }

  float o[MT][kDT][4];
  float m[MT][2], l[MT][2];  // running raw-score max and (per-lane partial) sum per row
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int d = 0; d < kDT; ++d)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mt][d][i] = 0.0f;
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int t = 0; t < num_kv_tiles; ++t) {
    cp_async_wait<0>();  // tile t (and Q) landed for this thread's copies
    __syncthreads();     // ... for every thread's; and every warp is done with tile t-1
    if (t + 1 < num_kv_tiles) load_kv(t + 1, (t + 1) & 1);  // into the stage tile t-1 used
    cp_async_commit();

    const bf16* sK = sKV + 2 * (t & 1) * L::kTileElems;
    const bf16* sV = sK + L::kTileElems;

    // S = Q K^T: [MT][kNT] m16n8 tiles.
    float s[MT][kNT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int n = 0; n < kNT; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) s[mt][n][i] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[mt][i] = qf[ks][i];
        } else {
          ldmatrix_x4(a[mt], sQ + qa_off + mt * 16 * kLd + ks * 16);
        }
      }
#pragma unroll
      for (int np = 0; np < kBN / 16; ++np) {
        unsigned b[4];
        ldmatrix_x4(b, sK + kb_off + np * 16 * kLd + ks * 16);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(s[mt][2 * np], a[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Causal mask, only on tiles reaching past the first row's position (the diagonal
    // tiles, and the zero-filled keys >= kv_end, which lie past every valid row's position).
    if (t * kBN + kBN - 1 > diag) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int n = 0; n < kNT; ++n)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int row = wrow + mt * 16 + frag::c_row(lane, i);
            const int key = t * kBN + n * 8 + frag::c_col(lane, i);
            if (key > diag + row) s[mt][n][i] = -INFINITY;
          }
    }

    // Online softmax; P overwrites S.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {  // rows lane/4 (hf 0) and lane/4 + 8 (hf 1)
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kNT; ++n) mx = fmaxf(mx, fmaxf(s[mt][n][2 * hf], s[mt][n][2 * hf + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m[mt][hf], mx);
        const float ms = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
        const float alpha = fast_exp2(fmaf(m[mt][hf], scale_log2, -ms));  // m_old = -inf: 0
        m[mt][hf] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int n = 0; n < kNT; ++n)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = fast_exp2(fmaf(s[mt][n][2 * hf + e], scale_log2, -ms));
            s[mt][n][2 * hf + e] = pv;
            sum += pv;
          }
        l[mt][hf] = l[mt][hf] * alpha + sum;
#pragma unroll
        for (int d = 0; d < kDT; ++d) {
          o[mt][d][2 * hf] *= alpha;
          o[mt][d][2 * hf + 1] *= alpha;
        }
      }

      // O += P V: P from the S registers (bf16), V via ldmatrix.trans.
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      unsigned a[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const float* sv = s[mt][2 * kk + frag::p_ntile(r)];
          a[mt][r] = pack_bf16(sv[frag::p_elem(r)], sv[frag::p_elem(r) + 1]);
        }
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        unsigned b[4];
        ldmatrix_x4_trans(b, sV + va_off + kk * 16 * kLd + dp * 16);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma_bf16(o[mt][2 * dp], a[mt], b[0], b[1]);
          mma_bf16(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  // Normalise, write O (bf16) and LSE = scale * max + log(sum), natural log.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float lt = l[mt][hf];
      lt += __shfl_xor_sync(0xffffffffu, lt, 1);
      lt += __shfl_xor_sync(0xffffffffu, lt, 2);
      const int row = wrow + mt * 16 + frag::c_row(lane, 2 * hf);
      const int qi = q0 + row;
      if (qi < nq) {
        const float inv = (lt > 0.0f ? 1.0f / lt : 0.0f) * v_scale;
        bf16* orow = p.out + static_cast<long long>(row0 + qi) * p.out_stride + h * HD;
#pragma unroll
        for (int d = 0; d < kDT; ++d)
          *reinterpret_cast<__nv_bfloat162*>(orow + d * 8 + frag::c_col(lane, 2 * hf)) =
              __floats2bfloat162_rn(o[mt][d][2 * hf] * inv, o[mt][d][2 * hf + 1] * inv);
        if (p.lse && (lane & 3) == 0)
          p.lse[static_cast<long long>(row0 + qi) * p.heads + h] = m[mt][hf] * qk_scale + logf(lt);
      }
    }
}

template <int HD, int HPB, int MT, bool kKv8>
void launch_fa2_kv(const PrefillAttentionParams& p, cudaStream_t s) {
  constexpr size_t bytes = Fa2Smem<HD, HPB>::kBytes;
  CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_fa2_kernel<HD, HPB, MT, kKv8>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)));
  prefill_attention_fa2_kernel<HD, HPB, MT, kKv8>
      <<<dim3(p.num_tiles, p.heads / HPB), kThreads, bytes, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

template <int HD, int HPB, int MT>
void launch_fa2(const PrefillAttentionParams& p, cudaStream_t s) {
  if (p.kv_pool8)
    launch_fa2_kv<HD, HPB, MT, true>(p, s);
  else
    launch_fa2_kv<HD, HPB, MT, false>(p, s);
}

}  // namespace

void launch_prefill_attention_fa2(const PrefillAttentionParams& p, cudaStream_t s,
                                  bool pair_heads) {
  // Pair two query heads of one KV group per block when the group size allows it.
  const bool pair = pair_heads && (p.heads / p.kv_heads) % 2 == 0;
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, "prefill attention (fa2)", HD, {
    if (pair)
      launch_fa2<HD, 2, 2>(p, s);
    else
      launch_fa2<HD, 1, 1>(p, s);
  });
}

}  // namespace strata::cuda
