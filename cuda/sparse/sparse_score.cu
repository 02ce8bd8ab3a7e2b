// SnapKV scoring from the prefill kernel's LSE (DESIGN.md section 3), and the score
// averages of direct-prefilled sparse layers.
//
// One block per (64-key tile, KV head, sequence). The block loads its keys once, then walks
// the alpha * group window-query rows in chunks of 32: a tensor-core product (WMMA bf16,
// fp32 accumulate) gives the 64 x 32 logits, and each thread adds exp(logit * scale - lse)
// of its key into a register. Every key is owned by one block, so there is no cross-block
// reduction; the cost is alpha * group * L * head_dim per KV head instead of L^2.
// FP8 KV (PrefillParams::dst_pool8): the keys' e4m3 codes become exact bf16 tile values and
// the K scale joins the softmax scale (exp(q . code * scale * s_k - lse)).
#include <mma.h>

#include "cuda/sparse/sparse_common.cuh"
#include "cuda/sparse/sparse_kernels.h"

namespace strata::cuda::sparse {
namespace {

using namespace detail;
namespace wmma = nvcuda::wmma;

constexpr int kKeys = 64;  // keys per block
constexpr int kRows = 32;  // window-query rows per chunk
constexpr int kThreads = 256;
constexpr int kPad = 8;  // bf16 row padding (keeps WMMA ldm a multiple of 8)
constexpr int kLogitLd = kRows + 4;

template <int HD>
__global__ void __launch_bounds__(kThreads) score_kernel(const PrefillParams p) {
  const PrefillSeq& s = p.seqs[blockIdx.z];
  const int L = s.prompt_len;
  const int key0 = blockIdx.x * kKeys;
  if (key0 >= L) return;
  const int g = blockIdx.y;
  const int group = p.q_heads / p.kv_heads;
  const bool direct = s.direct != 0;
  // Queries: select mode the last min(alpha, L) positions, direct mode the chunk.
  const int first_q = direct ? s.chunk_start : L - min(s.window, L);
  const int nq = L - first_q;
  const int rows = nq * group;
  const float keep = 1.0f - 1.0f / static_cast<float>(s.window);  // direct: EMA decay
  const std::size_t q_stride =
      p.q_stride > 0 ? p.q_stride : static_cast<std::size_t>(p.q_heads) * HD;

  __shared__ __align__(32) bf16 ks[kKeys][HD + kPad];
  __shared__ __align__(32) bf16 qs[kRows][HD + kPad];
  __shared__ __align__(32) float logits[kKeys][kLogitLd];
  __shared__ float lse_s[kRows];
  __shared__ float weight_s[kRows];  // direct: (1 - 1/alpha)^(queries after this one)

  const int tid = threadIdx.x;
  const std::int32_t* table = direct ? p.dst_pages + s.dst_table : p.src_pages + s.src_table;
  const bf16* src = direct ? p.dst_pool : (s.src_scratch ? p.scratch_pool : p.src_pool);
  // FP8 KV: the codes converted exactly to bf16 (an e4m3 value has 4 significant bits), the K
  // scale folded into the softmax scale below (1 for bf16: the same bits as before).
  const bool e4m3 = p.dst_pool8 != nullptr;
  const std::uint8_t* src8 = direct ? p.dst_pool8 : (s.src_scratch ? p.scratch_pool8 : p.src_pool8);
  const float logit_scale = e4m3 ? p.scale * p.kv_scales[g * 2] : p.scale;
  constexpr int kVec = HD / 8;  // 8 elements (a uint4 of bf16, a uint2 of codes) per step
  for (int e = tid; e < kKeys * kVec; e += kThreads) {
    const int r = e / kVec, c = e % kVec;
    const int key = key0 + r;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (key < L) {
      const std::size_t off = kv_elem(table, p.page_elems, p.kv_heads, HD, g, key, false);
      if (e4m3) {
        const uint2 codes = reinterpret_cast<const uint2*>(src8 + off)[c];
        const std::uint32_t w[2] = {codes.x, codes.y};
        std::uint32_t out[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const std::uint32_t two = (w[i / 2] >> (16 * (i % 2))) & 0xFFFFu;
          const float lo = e4m3_value(static_cast<std::uint8_t>(two & 0xFFu));
          const float hi = e4m3_value(static_cast<std::uint8_t>(two >> 8));
          const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);  // exact
          out[i] = *reinterpret_cast<const std::uint32_t*>(&b);
        }
        v = make_uint4(out[0], out[1], out[2], out[3]);
      } else {
        v = reinterpret_cast<const uint4*>(src + off)[c];
      }
    }
    *reinterpret_cast<uint4*>(&ks[r][c * 8]) = v;
  }

  const int warp = tid / 32;
  const int tile_m = warp / 2;  // 4 key tiles of 16
  const int tile_n = warp % 2;  // 2 row tiles of 16
  const int my_key = tid / 4;   // 4 threads per key, 8 rows each
  const int my_sub = tid % 4;
  const int key_pos = key0 + my_key;
  float acc = 0.0f;

  // Queries before this key tile see none of its keys: start at the first that can.
  const int row_begin = (max(0, key0 - first_q) * group) / kRows * kRows;
  for (int r0 = row_begin; r0 < rows; r0 += kRows) {
    __syncthreads();  // previous chunk's qs/logits are consumed
    for (int e = tid; e < kRows * kVec; e += kThreads) {
      const int r = e / kVec, c = e % kVec;
      const int row = r0 + r;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row < rows) {
        const int qi = row / group, h = g * group + row % group;
        const std::size_t off =
            static_cast<std::size_t>(s.q_row + qi) * q_stride + static_cast<std::size_t>(h) * HD;
        v = reinterpret_cast<const uint4*>(p.q + off)[c];
      }
      *reinterpret_cast<uint4*>(&qs[r][c * 8]) = v;
    }
    if (tid < kRows) {
      const int row = r0 + tid;
      float l = 0.0f, w = 1.0f;
      if (row < rows) {
        const int qi = row / group, h = g * group + row % group;
        l = p.lse[static_cast<std::size_t>(s.q_row + qi) * p.q_heads + h];
        if (direct) w = powf(keep, static_cast<float>(nq - 1 - qi));
      }
      lse_s[tid] = l;
      weight_s[tid] = w;
    }
    __syncthreads();

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
#pragma unroll
    for (int k = 0; k < HD; k += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b;
      wmma::load_matrix_sync(a, &ks[tile_m * 16][k], HD + kPad);
      wmma::load_matrix_sync(b, &qs[tile_n * 16][k], HD + kPad);
      wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(&logits[tile_m * 16][tile_n * 16], c, kLogitLd, wmma::mem_row_major);
    __syncthreads();

#pragma unroll
    for (int j = 0; j < kRows / 4; ++j) {
      const int r = my_sub * (kRows / 4) + j;
      const int row = r0 + r;
      const int pos = first_q + row / group;  // the query's position
      if (row < rows && key_pos <= pos) {
        float e = expf(logits[my_key][r] * logit_scale - lse_s[r]);
        if (direct) e *= weight_s[r] * (key_pos == pos ? 1.0f : 1.0f - keep);
        acc += e;
      }
    }
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  if (my_sub != 0 || key_pos >= L) return;
  if (direct) {
    float& sc = p.dst_scores[score_elem(table, p.kv_heads, g, key_pos)];
    sc = key_pos < s.chunk_start ? powf(keep, static_cast<float>(nq)) * sc + acc : acc;
    // The chunk's own keys: slot key_pos holds position key_pos.
    if (p.dst_positions && key_pos >= s.chunk_start)
      p.dst_positions[score_elem(table, p.kv_heads, g, key_pos)] = key_pos;
  } else {
    p.raw[s.score_off + static_cast<std::int64_t>(g) * L + key_pos] = acc;
  }
}

}  // namespace

cudaError_t launch_sparse_score(const PrefillParams& p, cudaStream_t stream) {
  if (p.num_seqs <= 0 || p.max_len <= 0) return cudaSuccess;
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0) return cudaErrorInvalidValue;
  if (p.dst_pool8 && !p.kv_scales) return cudaErrorInvalidValue;  // e4m3 codes need the scales
  const dim3 grid((p.max_len + kKeys - 1) / kKeys, p.kv_heads, p.num_seqs);
  switch (p.head_dim) {
    case 64:
      score_kernel<64><<<grid, kThreads, 0, stream>>>(p);
      break;
    case 128:
      score_kernel<128><<<grid, kThreads, 0, stream>>>(p);
      break;
    default:  // only the head sizes of the supported models are compiled
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace strata::cuda::sparse
