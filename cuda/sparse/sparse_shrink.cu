// Live shrink of sparse layers (LayerAction::kShrink), the GPU twin of snapkv::shrink_order.
// One block per (KV head, sequence): the kept order is computed with the same exact radix
// select as the prompt selection, the kept K/V and scores are staged in a scratch buffer and
// written back to slots [0, n) (each block touches only its own head's slots). FP8 KV
// (ShrinkParams::pool8): the e4m3 codes are staged and written back as they are.
#include "cuda/sparse/sparse_common.cuh"
#include "cuda/sparse/sparse_kernels.h"
#include "cuda/sparse/sparse_radix.cuh"

namespace strata::cuda::sparse {
namespace {

using namespace detail;

__global__ void __launch_bounds__(kSelectThreads) shrink_kernel(const ShrinkParams p) {
  const ShrinkSeq& s = p.seqs[blockIdx.y];
  if (s.policy == 0) return;
  const int g = blockIdx.x, tid = threadIdx.x, hd = p.head_dim;
  const int C = s.capacity, r = s.ring, valid = s.valid;
  const bool ring_full = r > 0 && valid == C;
  const int sinks = min(s.sinks, valid);
  const int aged_size = valid - sinks;  // non-sink slots, oldest first
  const int selected = C - r - sinks;   // ring_full: aged [0, selected) are [sinks, C - r)
  auto aged = [&](int j) {
    return (ring_full && j >= selected) ? C - r + (s.ring_pos + j - selected) % r : sinks + j;
  };
  auto aged_index = [&](int slot) {
    return (ring_full && slot >= C - r) ? selected + (slot - (C - r) - s.ring_pos + r) % r
                                        : slot - sinks;
  };
  const int n = min(valid, s.shrink_to);
  const int others = n - sinks;
  int recent = 0;
  if (s.policy == kPolicyWindow) recent = others;
  if (s.policy == kPolicyScored) recent = min(r, others);
  if (s.policy == kPolicySnapKv) recent = min(s.window, others);
  const int older = aged_size - recent;  // candidates: aged [0, older)
  const int k = others - recent;
  const std::int32_t* table = p.pages + s.table;
  auto score_of = [&](int slot) -> float& {
    return p.scores[score_elem(table, p.kv_heads, g, slot)];
  };
  auto key_of = [&](int j) { return select_key(score_of(aged(j)), j); };

  __shared__ int hist[kSelectThreads];
  __shared__ BlockScan::TempStorage scan;
  __shared__ int shared_digit, shared_rem;
  std::uint64_t threshold = 0;
  if (k > 0 && k < older)
    threshold = radix_select(0, older, k, key_of, hist, scan, &shared_digit, &shared_rem);

  std::int32_t* order = p.stage_idx + s.stage_off + static_cast<std::int64_t>(g) * s.shrink_to;
  for (int j = tid; j < sinks; j += kSelectThreads) order[j] = j;
  for (int t = tid; t < recent; t += kSelectThreads) order[sinks + k + t] = aged(older + t);
  int base = 0;
  for (int s0 = sinks; s0 < valid && k > 0; s0 += kSelectThreads) {  // chosen, in slot order
    const int slot = s0 + tid;
    int flag = 0;
    if (slot < valid) {
      const int j = aged_index(slot);
      flag = (j < older && key_of(j) >= threshold) ? 1 : 0;
    }
    int pos = 0, total = 0;
    BlockScan(scan).ExclusiveSum(flag, pos, total);
    if (flag) order[sinks + base + pos] = slot;
    base += total;
    __syncthreads();
  }
  __syncthreads();  // order (global) visible to the block

  // Stage, then write back (one warp per slot; lanes 0-15 K, 16-31 V).
  const int warp = tid / 32, lane = tid % 32, warps = kSelectThreads / 32;
  const bool v = lane >= 16;
  const std::int64_t stage_row0 = (s.stage_off + static_cast<std::int64_t>(g) * s.shrink_to) * 2;
  bf16* stage = p.pool8 ? nullptr : p.stage_kv + stage_row0 * hd;
  std::uint8_t* stage8 = p.pool8 ? p.stage_kv8 + stage_row0 * hd : nullptr;  // FP8 KV: codes
  auto copy = [&](bool to_stage, int j, int slot) {  // K (lanes 0-15) or V (16-31) of one slot
    const std::size_t pool_off = kv_elem(table, p.page_elems, p.kv_heads, hd, g, slot, v);
    const std::size_t stage_off = (static_cast<std::size_t>(j) * 2 + v) * hd;
    if (p.pool8) {
      if (to_stage)
        copy_row8(stage8 + stage_off, p.pool8 + pool_off, hd, lane % 16, 16);
      else
        copy_row8(p.pool8 + pool_off, stage8 + stage_off, hd, lane % 16, 16);
    } else if (to_stage) {
      copy_row(stage + stage_off, p.pool + pool_off, hd, lane % 16, 16);
    } else {
      copy_row(p.pool + pool_off, stage + stage_off, hd, lane % 16, 16);
    }
  };
  float* stage_score = p.stage_score + s.stage_off + static_cast<std::int64_t>(g) * s.shrink_to;
  const bool positions = p.positions && p.stage_pos;
  std::int32_t* stage_pos =
      positions ? p.stage_pos + s.stage_off + static_cast<std::int64_t>(g) * s.shrink_to : nullptr;
  auto pos_of = [&](int slot) -> std::int32_t& {
    return p.positions[score_elem(table, p.kv_heads, g, slot)];
  };
  for (int j = warp; j < n; j += warps) {
    const int from = order[j];
    copy(true, j, from);
    if (lane == 0) {
      stage_score[j] = score_of(from);
      if (positions) stage_pos[j] = pos_of(from);
    }
  }
  __syncthreads();
  for (int j = warp; j < n; j += warps) {
    copy(false, j, j);
    if (lane == 0) {
      score_of(j) = stage_score[j];
      if (positions) pos_of(j) = stage_pos[j];
    }
  }
}

}  // namespace

cudaError_t launch_sparse_shrink(const ShrinkParams& p, cudaStream_t stream) {
  if (p.num_seqs <= 0) return cudaSuccess;
  if (p.head_dim % 8 != 0 || p.head_dim > 256) return cudaErrorInvalidValue;
  if (p.pool8 && (p.head_dim % 16 != 0 || !p.stage_kv8)) return cudaErrorInvalidValue;
  shrink_kernel<<<dim3(p.kv_heads, p.num_seqs), kSelectThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace strata::cuda::sparse
