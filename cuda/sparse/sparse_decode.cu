// Decode-side operations of `scored` layers (DESIGN.md section 3, docs/contracts.md).
//
// Probabilities for the score averages, p = exp(logit - lse), come either from the decode
// attention's own scaled logits (DecodeParams::logits: every split writes the logits of its
// own key range, the merge writes the final LSE, so split-KV needs no change; per sequence and
// layer that is q_heads * C * 4 bytes written and read again, 64 KiB for C = 512 on the 8B
// shape) or, without them, recomputed from Q, K and the LSE: one extra read of the layer's C
// slots of K per sequence (C * kv_heads * head_dim * 2 bytes, 1 MiB for C = 512; half with an
// FP8 KV cache, whose codes the resolve moves as they are and the update reads exactly).
#include "cuda/sparse/sparse_common.cuh"
#include "cuda/sparse/sparse_kernels.h"

namespace strata::cuda::sparse {
namespace {

using namespace detail;

constexpr int kResolveWarps = 8;

__device__ ResolveView resolve_view(const DecodeParams& p) {
  return {p.scores, p.positions, p.pages, p.pool, p.pool8, p.page_elems, p.kv_heads, p.head_dim};
}

// One warp per (KV head, sequence): grid (ceil(kv_heads / kResolveWarps), num_seqs). The RoPE +
// K/V write runs the same function itself where the backend lets it (RopeKvParams::resolve).
__global__ void __launch_bounds__(kResolveWarps * 32) resolve_kernel(const DecodeParams p) {
  const int g = blockIdx.x * kResolveWarps + threadIdx.x / 32;
  if (g >= p.kv_heads) return;
  resolve_ring_head(resolve_view(p), p.seqs[blockIdx.y], g, threadIdx.x % 32);
}

constexpr int kMaxGroup = 16;
constexpr int kUpdateWarps = 8;
constexpr int kSlotsPerWarp = 4;
constexpr int kUpdateSlots = kUpdateWarps * kSlotsPerWarp;

template <int HD>
__global__ void __launch_bounds__(kUpdateWarps * 32) update_kernel(const DecodeParams p) {
  const DecodeSeq& s = p.seqs[blockIdx.z];
  if (s.policy == 0) return;  // full layer / padding
  const DecodeUpdateRow row = decode_update_row(s);
  const int slot0 = blockIdx.x * kUpdateSlots;
  if (slot0 >= row.attended) return;
  const int g = blockIdx.y;
  const int group = p.q_heads / p.kv_heads;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  __shared__ float qs[kMaxGroup][HD];
  __shared__ float lse_s[kMaxGroup];
  // q rows are token rows of the step's qkv buffer (row pitch q_stride); the decode
  // attention writes its LSE in decode batch order, i.e. at this entry's index blockIdx.z.
  const std::size_t q_pitch = p.q_stride > 0 ? static_cast<std::size_t>(p.q_stride)
                                             : static_cast<std::size_t>(p.q_heads) * HD;
  for (int e = tid; e < group * HD; e += kUpdateWarps * 32) {
    const int h = e / HD, d = e % HD;
    qs[h][d] = __bfloat162float(p.q[static_cast<std::size_t>(s.q_row) * q_pitch +
                                    static_cast<std::size_t>(g * group + h) * HD + d]);
  }
  if (tid < group)
    lse_s[tid] = p.lse[static_cast<std::size_t>(blockIdx.z) * p.q_heads + g * group + tid];
  __syncthreads();

  const std::int32_t* table = p.pages + s.table;
  constexpr int kPer = HD / 32;
  // FP8 KV: the codes' exact values, the K scale folded into the softmax scale (1 for bf16:
  // the same bits as before).
  const float logit_scale = p.pool8 ? p.scale * p.kv_scales[g * 2] : p.scale;
  for (int t = 0; t < kSlotsPerWarp; ++t) {
    const int j = slot0 + warp * kSlotsPerWarp + t;
    if (j >= row.attended) break;
    const std::size_t off = kv_elem(table, p.page_elems, p.kv_heads, HD, g, j, false);
    float kr[kPer];
    if (p.pool8) {
      const std::uint8_t* k8 = p.pool8 + off;
#pragma unroll
      for (int i = 0; i < kPer; ++i) kr[i] = e4m3_value(k8[lane + 32 * i]);
    } else {
      const bf16* k = p.pool + off;
#pragma unroll
      for (int i = 0; i < kPer; ++i) kr[i] = __bfloat162float(k[lane + 32 * i]);
    }
    float prob = 0.0f;
    for (int h = 0; h < group; ++h) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPer; ++i) dot += qs[h][lane + 32 * i] * kr[i];
#pragma unroll
      for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      prob = add_head_prob(prob, __fmul_rn(dot, logit_scale), lse_s[h]);
    }
    if (lane == 0) {
      const std::size_t e = score_elem(table, p.kv_heads, g, j);
      float& sc = p.scores[e];
      sc = updated_score(row, j, sc, prob);
      if (p.positions && j == row.new_slot) p.positions[e] = s.position;
    }
  }
}

// The update from the attention's logits: one thread per (slot, kv head, sequence); the
// group's heads are summed in index order (deterministic, no atomics).
constexpr int kLogitThreads = 256;

__global__ void __launch_bounds__(kLogitThreads) update_from_logits_kernel(const DecodeParams p) {
  const DecodeSeq& s = p.seqs[blockIdx.z];
  if (s.policy == 0) return;  // full layer / padding
  const DecodeUpdateRow rule = decode_update_row(s);
  const int j = blockIdx.x * kLogitThreads + threadIdx.x;
  if (j >= rule.attended) return;
  const int g = blockIdx.y;
  const int group = p.q_heads / p.kv_heads;
  const std::size_t row = static_cast<std::size_t>(blockIdx.z) * p.q_heads + g * group;
  float prob = 0.0f;
  for (int h = 0; h < group; ++h)
    prob = add_head_prob(prob, p.logits[(row + h) * static_cast<std::size_t>(p.logits_stride) + j],
                         p.lse[row + h]);
  const std::int32_t* table = p.pages + s.table;
  const std::size_t e = score_elem(table, p.kv_heads, g, j);
  float& sc = p.scores[e];
  sc = updated_score(rule, j, sc, prob);
  if (p.positions && j == rule.new_slot) p.positions[e] = s.position;
}

}  // namespace

cudaError_t launch_scored_resolve(const DecodeParams& p, cudaStream_t stream) {
  if (p.num_seqs <= 0) return cudaSuccess;
  if (p.head_dim % (p.pool8 ? 16 : 8) != 0) return cudaErrorInvalidValue;
  resolve_kernel<<<dim3((p.kv_heads + kResolveWarps - 1) / kResolveWarps, p.num_seqs),
                   kResolveWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_scored_update(const DecodeParams& p, cudaStream_t stream) {
  if (p.num_seqs <= 0 || p.max_slots <= 0) return cudaSuccess;
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0 || p.q_heads / p.kv_heads > kMaxGroup)
    return cudaErrorInvalidValue;
  if (p.logits) {
    if (p.logits_stride < p.max_slots) return cudaErrorInvalidValue;
    const dim3 grid((p.max_slots + kLogitThreads - 1) / kLogitThreads, p.kv_heads, p.num_seqs);
    update_from_logits_kernel<<<grid, kLogitThreads, 0, stream>>>(p);
    return cudaGetLastError();
  }
  if (p.pool8 && !p.kv_scales) return cudaErrorInvalidValue;  // e4m3 codes need the scales
  const dim3 grid((p.max_slots + kUpdateSlots - 1) / kUpdateSlots, p.kv_heads, p.num_seqs);
  switch (p.head_dim) {
    case 64:
      update_kernel<64><<<grid, kUpdateWarps * 32, 0, stream>>>(p);
      break;
    case 128:
      update_kernel<128><<<grid, kUpdateWarps * 32, 0, stream>>>(p);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace strata::cuda::sparse
