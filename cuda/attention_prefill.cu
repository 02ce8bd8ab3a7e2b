// Prefill attention: the run-time choice between the kernels (attention.h) and the WMMA
// kernel (PrefillKernel::kWmma; the default is the FA2 kernel of attention_prefill_fa2.cu; the
// Hopper kernel of attention_prefill_hopper.cu falls back to it where it does not apply). WMMA
// kernel: tensor cores (WMMA bf16 16x16x16, fp32 accumulate): one block = 64 query rows of one
// sequence and one query head, 4 warps of 16 rows; keys stream through shared memory in tiles of 64
// slots read from the pages, with an online softmax (log2 domain) and the O accumulator in shared
// memory (each warp rescales and accumulates its own 16 rows). Causal, GQA (kv head = h / group),
// ragged batch, paged prior context. Writes O (bf16) and the natural-log LSE.
#include <mma.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "cuda/attention.h"
#include "cuda/attention_prefill_impl.h"
#include "cuda/cuda_check.h"
#include "cuda/dispatch.h"
#include "cuda/kv_fp8.h"

namespace strata::cuda {

namespace {

using bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kBM = 64, kBN = 64, kThreads = 128;

template <int HD>
struct PrefillSmem {
  static constexpr int kLdQ = HD + 8;   // bf16 rows of Q, K, V
  static constexpr int kLdS = kBN + 4;  // fp32 scores
  static constexpr int kLdP = kBN + 8;  // bf16 probabilities
  static constexpr int kLdO = HD + 4;   // fp32 accumulator
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + sizeof(bf16) * kBM * kLdQ;
  static constexpr size_t kV = kK + sizeof(bf16) * kBN * kLdQ;
  static constexpr size_t kS = kV + sizeof(bf16) * kBN * kLdQ;
  static constexpr size_t kP = kS + sizeof(float) * kBM * kLdS;
  static constexpr size_t kO = kP + sizeof(bf16) * kBM * kLdP;
  static constexpr size_t kM = kO + sizeof(float) * kBM * kLdO;
  static constexpr size_t kL = kM + sizeof(float) * kBM;
  static constexpr size_t kBytes = kL + sizeof(float) * kBM;
};

template <int HD>
__global__ void __launch_bounds__(kThreads)
    prefill_attention_kernel(const PrefillAttentionParams p) {
  using L = PrefillSmem<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* sQ = reinterpret_cast<bf16*>(smem + L::kQ);
  bf16* sK = reinterpret_cast<bf16*>(smem + L::kK);
  bf16* sV = reinterpret_cast<bf16*>(smem + L::kV);
  float* sS = reinterpret_cast<float*>(smem + L::kS);
  bf16* sP = reinterpret_cast<bf16*>(smem + L::kP);
  float* sO = reinterpret_cast<float*>(smem + L::kO);
  float* sM = reinterpret_cast<float*>(smem + L::kM);
  float* sL = reinterpret_cast<float*>(smem + L::kL);

  const int tile = blockIdx.x, h = blockIdx.y;
  const int seq = p.tile_seq[tile], q0 = p.tile_q0[tile];
  const int nq = p.nq[seq], pos0 = p.q_pos0[seq], row0 = p.row_start[seq];
  const int g = h / (p.heads / p.kv_heads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  constexpr int kVec = HD / 8;  // uint4 per row

  // Q tile (rows past nq are zero), O = 0, m = -inf, l = 0.
  for (int i = threadIdx.x; i < kBM * kVec; i += kThreads) {
    const int r = i / kVec, c = i % kVec;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (q0 + r < nq)
      v = *reinterpret_cast<const uint4*>(p.q + static_cast<long long>(row0 + q0 + r) * p.q_stride +
                                          h * HD + c * 8);
    *reinterpret_cast<uint4*>(sQ + r * L::kLdQ + c * 8) = v;
  }
  for (int i = threadIdx.x; i < kBM * L::kLdO; i += kThreads) sO[i] = 0.0f;
  if (threadIdx.x < kBM) sM[threadIdx.x] = -INFINITY, sL[threadIdx.x] = 0.0f;

  const int last_q = min(q0 + kBM, nq) - 1;  // last valid query index of the tile
  const int kv_end = pos0 + last_q + 1;      // keys needed by the last valid row
  const float scale_log2 = p.scale * 1.4426950408889634f;
  const long long part = p.page_elems / 2;
  const int* table = p.block_table + static_cast<long long>(seq) * p.table_stride;

  for (int kb = 0; kb < kv_end; kb += kBN) {
    __syncthreads();  // previous tile's K/V/P fully consumed
    for (int i = threadIdx.x; i < kBN * kVec; i += kThreads) {
      const int r = i / kVec, c = i % kVec, j = kb + r;
      uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
      if (j < kv_end) {
        const bf16* base = p.kv_pool + static_cast<long long>(table[j >> 4]) * p.page_elems +
                           (static_cast<long long>(g) * 16 + (j & 15)) * HD + c * 8;
        kv = *reinterpret_cast<const uint4*>(base);
        vv = *reinterpret_cast<const uint4*>(base + part);
      }
      *reinterpret_cast<uint4*>(sK + r * L::kLdQ + c * 8) = kv;
      *reinterpret_cast<uint4*>(sV + r * L::kLdQ + c * 8) = vv;
    }
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
    {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[kBN / 16];
#pragma unroll
      for (int n = 0; n < kBN / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
      for (int k = 0; k < HD / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::load_matrix_sync(a, sQ + warp * 16 * L::kLdQ + k * 16, L::kLdQ);
#pragma unroll
        for (int n = 0; n < kBN / 16; ++n) {
          wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
          wmma::load_matrix_sync(b, sK + n * 16 * L::kLdQ + k * 16, L::kLdQ);
          wmma::mma_sync(acc[n], a, b, acc[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kBN / 16; ++n)
        wmma::store_matrix_sync(sS + warp * 16 * L::kLdS + n * 16, acc[n], L::kLdS,
                                wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax of the warp's rows; P in bf16; O rows rescaled.
    for (int rr = 0; rr < 16; ++rr) {
      const int r = warp * 16 + rr;
      const int qi = q0 + r;
      const int qpos = pos0 + qi;
      float s0 = sS[r * L::kLdS + lane] * scale_log2;
      float s1 = sS[r * L::kLdS + lane + 32] * scale_log2;
      const int j0 = kb + lane, j1 = kb + lane + 32;
      const bool row_ok = qi < nq;
      if (!row_ok || j0 > qpos) s0 = -INFINITY;
      if (!row_ok || j1 > qpos) s1 = -INFINITY;
      float mx = fmaxf(s0, s1);
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_old = sM[r];
      const float m_new = fmaxf(m_old, mx);
      float p0 = 0.0f, p1 = 0.0f, alpha = 1.0f;
      if (m_new != -INFINITY) {
        p0 = exp2f(s0 - m_new);
        p1 = exp2f(s1 - m_new);
        alpha = exp2f(m_old - m_new);
      }
      float sum = p0 + p1;
      for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      sP[r * L::kLdP + lane] = __float2bfloat16_rn(p0);
      sP[r * L::kLdP + lane + 32] = __float2bfloat16_rn(p1);
      if (alpha != 1.0f)
        for (int c = lane; c < HD; c += 32) sO[r * L::kLdO + c] *= alpha;
      __syncwarp();
      if (lane == 0) {
        sM[r] = m_new;
        sL[r] = sL[r] * alpha + sum;
      }
    }
    __syncwarp();

    // O += P V for the warp's rows.
#pragma unroll
    for (int n = 0; n < HD / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      float* o_tile = sO + warp * 16 * L::kLdO + n * 16;
      wmma::load_matrix_sync(acc, o_tile, L::kLdO, wmma::mem_row_major);
#pragma unroll
      for (int k = 0; k < kBN / 16; ++k) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b;
        wmma::load_matrix_sync(a, sP + warp * 16 * L::kLdP + k * 16, L::kLdP);
        wmma::load_matrix_sync(b, sV + k * 16 * L::kLdQ + n * 16, L::kLdQ);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_tile, acc, L::kLdO, wmma::mem_row_major);
    }
    __syncwarp();
  }
  __syncthreads();

  // Normalise and write O and LSE.
  for (int rr = 0; rr < 16; ++rr) {
    const int r = warp * 16 + rr, qi = q0 + r;
    if (qi >= nq) break;
    const float l = sL[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    bf16* o = p.out + static_cast<long long>(row0 + qi) * p.out_stride + h * HD;
    for (int c = lane; c < HD; c += 32) o[c] = __float2bfloat16_rn(sO[r * L::kLdO + c] * inv);
    if (p.lse && lane == 0)
      p.lse[static_cast<long long>(row0 + qi) * p.heads + h] =
          sM[r] * 0.6931471805599453f + logf(l);
  }
}

template <int HD>
void launch_prefill_hd(const PrefillAttentionParams& p, cudaStream_t s) {
  constexpr size_t bytes = PrefillSmem<HD>::kBytes;
  // Set on every launch: cheap, per device, and safe from several rank threads.
  CUDA_CHECK(cudaFuncSetAttribute(prefill_attention_kernel<HD>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)));
  prefill_attention_kernel<HD><<<dim3(p.num_tiles, p.heads), kThreads, bytes, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

bool is_hopper(PrefillKernel k) {
  return k == PrefillKernel::kHopper || k == PrefillKernel::kHopperV5 ||
         k == PrefillKernel::kHopperV6;
}

}  // namespace

void launch_prefill_attention_wmma(const PrefillAttentionParams& p, cudaStream_t s) {
  STRATA_DISPATCH_HEAD_DIM(p.head_dim, "prefill attention", HD, { launch_prefill_hd<HD>(p, s); });
}

PrefillKernel prefill_kernel_from_env() {
  static const PrefillKernel k = [] {
    const char* v = std::getenv("STRATA_PREFILL_ATTN");
    const std::string s = v ? v : "";
    // hopper_v5 is the default since the H200 load test of 2026-12-02 (docs/benchmarks.md
    // "Prefill attention on Hopper": servers on it and on v1 ran 1 / 20 / 256 concurrent
    // requests; the earlier stall at 256 was the census, 5d2d453). Devices other than
    // compute capability 9.0 and shapes it does not take run fa2 (said once).
    if (s.empty() || s == "hopper_v5") return PrefillKernel::kHopperV5;
    if (s == "fa2") return PrefillKernel::kFa2;
    if (s == "hopper") return PrefillKernel::kHopper;
    if (s == "wmma") return PrefillKernel::kWmma;
    if (s == "fa2_single") return PrefillKernel::kFa2Single;
    if (s == "hopper_v6") return PrefillKernel::kHopperV6;
    throw ConfigError("STRATA_PREFILL_ATTN", "prefill attention kernel '" + s +
                                                 "' is not one of: fa2, fa2_single, wmma, hopper, "
                                                 "hopper_v5, hopper_v6");
  }();
  return k;
}

const char* prefill_kernel_name(PrefillKernel k) {
  switch (k) {
    case PrefillKernel::kWmma:
      return "wmma";
    case PrefillKernel::kFa2Single:
      return "fa2_single";
    case PrefillKernel::kHopper:
      return "hopper";
    case PrefillKernel::kHopperV5:
      return "hopper_v5";
    case PrefillKernel::kHopperV6:
      return "hopper_v6";
    case PrefillKernel::kFa2:
      break;
  }
  return "fa2";
}

void launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t s) {
  launch_prefill_attention(p, s, prefill_kernel_from_env());
}

void launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t s, PrefillKernel k) {
  if (p.num_tiles == 0) return;
  if (p.kv_heads <= 0 || p.heads % p.kv_heads != 0)
    throw ConfigError("num_key_value_heads", "prefill attention: heads " + std::to_string(p.heads) +
                                                 " not a multiple of kv_heads " +
                                                 std::to_string(p.kv_heads));
  if (p.kv_pool8) {
    // FP8 KV (docs/kv-fp8.md): the FA2 kernel dequantizes e4m3 tiles into its bf16 shared
    // memory; the Hopper kernels read bf16 pages, so they run over the staged copy.
    if (!p.kv_scales)
      throw InternalError("prefill attention: an e4m3 pool (kv_pool8) needs kv_scales");
    if (!is_hopper(k) || !p.fp8_stage.fits()) {
      launch_prefill_attention_fa2(p, s, k != PrefillKernel::kFa2Single);
      return;
    }
    launch_kv_dequant_pages({.pool8 = p.kv_pool8,
                             .scales = p.kv_scales,
                             .page_elems = p.page_elems,
                             .block_table = p.block_table,
                             .table_stride = p.table_stride,
                             .nq = p.nq,
                             .q_pos0 = p.q_pos0,
                             .num_seqs = p.fp8_stage.num_seqs,
                             .max_pages = p.fp8_stage.ctx_max_pages,
                             .kv_heads = p.kv_heads,
                             .head_dim = p.head_dim,
                             .out_pool = p.fp8_stage.pool,
                             .out_table = p.fp8_stage.table,
                             .out_stride = p.fp8_stage.stride},
                            s);
    PrefillAttentionParams b = p;  // the same launch over the bf16 pages
    b.kv_pool = p.fp8_stage.pool;
    b.block_table = p.fp8_stage.table;
    b.table_stride = p.fp8_stage.stride;
    b.kv_pool8 = nullptr;
    b.kv_scales = nullptr;
    b.fp8_stage = {};
    launch_prefill_attention(b, s, k);
    return;
  }
  if (is_hopper(k)) {
    // The variant numbers of launch_prefill_attention_hopper (attention_prefill_impl.h).
    const int variant = k == PrefillKernel::kHopper ? 1 : k == PrefillKernel::kHopperV5 ? 5 : 6;
    std::string why;
    if (launch_prefill_attention_hopper(p, s, &why, variant)) return;
    // Shapes or devices the Hopper kernel does not take run the FA2 kernel; said once per process.
    static std::once_flag said;
    std::call_once(said, [&] {
      std::fprintf(stderr,
                   "strata: prefill attention 'hopper' not used (%s); running 'fa2' instead\n",
                   why.c_str());
    });
    k = PrefillKernel::kFa2;
  }
  if (k == PrefillKernel::kWmma)
    launch_prefill_attention_wmma(p, s);
  else
    launch_prefill_attention_fa2(p, s, k == PrefillKernel::kFa2);
}

}  // namespace strata::cuda
