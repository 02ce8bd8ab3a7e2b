// Pooling, exact top-k selection and compaction of the kept K/V (DESIGN.md section 3).
//
// Top-k: CUDA 13.0's CCCL has no DeviceTopK, and a block radix sort holds only a few
// thousand items while prompts run to 128k. One block per (sequence, KV head) therefore runs
// an exact MSB-first radix select over unique 64-bit keys (ordered score bits, then the
// inverted position, so ties go to the lower position) with CUB block scans for the digit
// histograms and the ordered output: 8 passes over the head's pooled scores (L2-resident),
// then one compaction pass. Any prompt length, no temporary storage, graph-capturable.
#include "cuda/sparse/sparse_common.cuh"
#include "cuda/sparse/sparse_kernels.h"
#include "cuda/sparse/sparse_radix.cuh"

namespace strata::cuda::sparse {
namespace {

using namespace detail;

__global__ void __launch_bounds__(kSelectThreads) select_kernel(const PrefillParams p) {
  const PrefillSeq& s = p.seqs[blockIdx.y];
  const int g = blockIdx.x;
  const int L = s.prompt_len, C = s.capacity, sinks = s.sinks, alpha = s.window;
  const int tid = threadIdx.x;
  std::int32_t* kept = p.kept_idx + s.kept_off + static_cast<std::int64_t>(g) * C;
  float* kept_score = p.kept_score + s.kept_off + static_cast<std::int64_t>(g) * C;

  if (s.direct) return;
  const float* raw = p.raw + s.score_off + static_cast<std::int64_t>(g) * L;
  float* pooled = p.pooled + s.score_off + static_cast<std::int64_t>(g) * L;
  const float inv_alpha = 1.0f / static_cast<float>(alpha);

  if (s.policy == kPolicyWindow) {  // sinks + the most recent C - sinks positions, in order
    for (int j = tid; j < s.kept; j += kSelectThreads) {
      const int pos = (L <= C || j < sinks) ? j : L - (C - sinks) + (j - sinks);
      kept[j] = pos;
      kept_score[j] = raw[pos] * inv_alpha;
    }
    return;
  }
  const int lo = min(sinks, L);
  const int hi = max(lo, L - alpha);  // selectable range [lo, hi)
  const int half = s.pool_kernel / 2;

  // Pooling over [lo, hi): positions outside the range do not count.
  for (int i = lo + tid; i < hi; i += kSelectThreads) {
    const int a = max(lo, i - half), b = min(hi - 1, i + half);
    float v;
    if (s.pool_kind == kPoolMax) {
      v = raw[a];
      for (int j = a + 1; j <= b; ++j) v = fmaxf(v, raw[j]);
    } else {
      float sum = 0.0f;
      for (int j = a; j <= b; ++j) sum += raw[j];
      v = sum / static_cast<float>(b - a + 1);
    }
    pooled[i] = v;
  }
  __syncthreads();  // pooled (global) is visible to the whole block

  const int n = hi - lo;
  const int k = min(max(C - alpha - sinks, 0), n);
  __shared__ int hist[kSelectThreads];
  __shared__ BlockScan::TempStorage scan;
  __shared__ int shared_digit, shared_rem;

  // Sinks and window keep their raw mean probability.
  for (int j = tid; j < lo; j += kSelectThreads) {
    kept[j] = j;
    kept_score[j] = raw[j] * inv_alpha;
  }
  for (int t = tid; t < L - hi; t += kSelectThreads) {
    kept[lo + k + t] = hi + t;
    kept_score[lo + k + t] = raw[hi + t] * inv_alpha;
  }
  if (k == 0) return;

  auto key_of = [&](int i) { return select_key(pooled[i], i); };
  std::uint64_t threshold = 0;  // k == n: every key qualifies
  if (k < n) threshold = radix_select(lo, hi, k, key_of, hist, scan, &shared_digit, &shared_rem);

  // Ordered compaction of the keys >= threshold (exactly k of them: keys are unique).
  int base = 0;
  for (int t0 = lo; t0 < hi; t0 += kSelectThreads) {
    const int i = t0 + tid;
    const int flag = (i < hi && key_of(i) >= threshold) ? 1 : 0;
    int pos = 0, total = 0;
    BlockScan(scan).ExclusiveSum(flag, pos, total);
    if (flag) {
      kept[lo + base + pos] = i;
      kept_score[lo + base + pos] = pooled[i] * inv_alpha;
    }
    base += total;
    __syncthreads();  // scan storage is reused
  }
}

// One warp per (kept slot, head): copy K and V, write the score.
constexpr int kCompactWarps = 8;

__global__ void __launch_bounds__(kCompactWarps * 32) compact_kernel(const PrefillParams p) {
  const PrefillSeq& s = p.seqs[blockIdx.z];
  const int g = blockIdx.y;
  const int j = blockIdx.x * kCompactWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (s.direct || j >= s.kept) return;
  const std::int64_t at = s.kept_off + static_cast<std::int64_t>(g) * s.capacity + j;
  const int src = p.kept_idx[at];
  const std::int32_t* dst_table = p.dst_pages + s.dst_table;
  const std::int32_t* src_table = p.src_pages + s.src_table;
  const bf16* src_pool = s.src_scratch ? p.scratch_pool : p.src_pool;
  const int hd = p.head_dim;
  // Lanes 0-15 copy K, 16-31 copy V. FP8 KV: the e4m3 codes as they are (fixed scales).
  const bool v = lane >= 16;
  const std::size_t dst_off = kv_elem(dst_table, p.page_elems, p.kv_heads, hd, g, j, v);
  const std::size_t src_off = kv_elem(src_table, p.page_elems, p.kv_heads, hd, g, src, v);
  if (p.dst_pool8)
    copy_row8(p.dst_pool8 + dst_off, (s.src_scratch ? p.scratch_pool8 : p.src_pool8) + src_off, hd,
              lane % 16, 16);
  else
    copy_row(p.dst_pool + dst_off, src_pool + src_off, hd, lane % 16, 16);
  if (lane == 0) {
    const std::size_t e = score_elem(dst_table, p.kv_heads, g, j);
    p.dst_scores[e] = p.kept_score[at];
    if (p.dst_positions) p.dst_positions[e] = src;  // source slot src holds position src
  }
}

}  // namespace

cudaError_t launch_sparse_select(const PrefillParams& p, cudaStream_t stream) {
  if (p.num_seqs <= 0) return cudaSuccess;
  select_kernel<<<dim3(p.kv_heads, p.num_seqs), kSelectThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_sparse_compact(const PrefillParams& p, cudaStream_t stream) {
  if (p.num_seqs <= 0 || p.max_kept <= 0) return cudaSuccess;
  if (p.head_dim % (p.dst_pool8 ? 16 : 8) != 0) return cudaErrorInvalidValue;
  const dim3 grid((p.max_kept + kCompactWarps - 1) / kCompactWarps, p.kv_heads, p.num_seqs);
  compact_kernel<<<grid, kCompactWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t launch_sparse_prefill(const PrefillParams& p, cudaStream_t stream) {
  cudaError_t e = launch_sparse_score(p, stream);
  if (e == cudaSuccess) e = launch_sparse_select(p, stream);
  if (e == cudaSuccess) e = launch_sparse_compact(p, stream);
  return e;
}

}  // namespace strata::cuda::sparse
