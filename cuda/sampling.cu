// The device sampler (cuda/sampling.h; rules in runtime/sampling_params.h, oracle
// runtime/sampler.cpp). One 1024-thread block per row; every stage is a block-wide pass over
// the row (L2-resident after the first):
//   0. NaN/+inf check (the first offending id is reported, as the host does);
//   1. logit_bias (fp32 adds in request order) and min_tokens bans, one thread per edited id;
//   2. penalties: the history ids are counted into a dense [vocab] scratch row (bit 30: seen
//      in the prompt, low bits: output count), then one pass applies repetition and
//      frequency/presence with the host's fp32 operations (no contraction);
//   3. row max (lowest id on ties); log-partition in fp64 (always: every token's logprob);
//      top-N by a radix select on the (value desc, id asc) order;
//   4. greedy, or weights exp((l - max) / T) in fp64, top-k (radix select by count), top-p
//      (radix select by mass over the top-k set), min-p (w >= min_p: w(argmax) = 1);
//   5. the draw in vocabulary order over the kept set: per-thread contiguous chunks, a CUB
//      block scan of the chunk masses, target = floor(kept_mass * u).
// Masses are 2^-44 fixed point (integer sums: exact and independent of the summation order,
// so a seeded row draws the same token on every run however the threads interleave).
#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "cuda/cuda_check.h"
#include "cuda/sampling.h"

namespace strata::cuda {
namespace {

constexpr int kThreads = kSampleThreads;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr double kFxScale = 17592186044416.0;  // 2^44
constexpr int kSeenInPrompt = 1 << 30;

using u64 = unsigned long long;

// Monotone map float -> uint32 (larger value, larger key); -0 and +0 compare equal on the
// host, so they share a key.
__device__ __forceinline__ unsigned order_key(float f) {
  if (f == 0.0f) f = 0.0f;
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ double weight(float l, double lmax, double inv_t) {
  return exp((static_cast<double>(l) - lmax) * inv_t);
}
__device__ __forceinline__ u64 to_fx(double w) {
  return __double2ull_rn(w * kFxScale);
}

// A prefix of the order (value desc, id asc): tokens with key > `key`, and those with
// key == `key` and id <= `id`. The default holds every token.
struct Cut {
  unsigned key = 0;
  int id = INT_MAX;
  __device__ bool in(unsigned k, int i) const { return k > key || (k == key && i <= id); }
};

struct Shared {
  union {
    cub::BlockScan<u64, kThreads>::TempStorage scan64;
    cub::BlockScan<int, kThreads>::TempStorage scan32;
    cub::BlockReduce<double, kThreads>::TempStorage red_d;
    cub::BlockReduce<u64, kThreads>::TempStorage red_u;
  } cub;
  u64 hist_mass[256];
  int hist_count[256];
  float warp_v[kWarps];
  int warp_i[kWarps];
  int bad_index;
  int argmax;
  float lmax;
  double log_z;
  unsigned sel_prefix;
  int sel_above;
  u64 sel_above_mass;
  int sel_ties;
  u64 sel_tie_mass;
  u64 total;
  int pivot_id;
  int ntop;
  int top_ids[kMaxDeviceLogprobs];
  int token;
};

// This thread's contiguous chunk [lo, hi) of the row (vocabulary order across threads).
__device__ __forceinline__ void chunk_of(int V, int& lo, int& hi) {
  const int c = (V + kThreads - 1) / kThreads;
  lo = min(V, static_cast<int>(threadIdx.x) * c);
  hi = min(V, lo + c);
}

// The r-th smallest id (r >= 1) among tokens with key == `key` inside `outer`.
__device__ int nth_tied_id(const float* row, int V, unsigned key, int r, const Cut& outer,
                           Shared& sh) {
  int lo, hi;
  chunk_of(V, lo, hi);
  int cnt = 0;
  for (int i = lo; i < hi; ++i) {
    const unsigned k = order_key(row[i]);
    cnt += (k == key && outer.in(k, i)) ? 1 : 0;
  }
  int excl = 0;
  cub::BlockScan<int, kThreads>(sh.cub.scan32).ExclusiveSum(cnt, excl);
  if (excl < r && r <= excl + cnt) {
    int left = r - excl;
    for (int i = lo; i < hi; ++i) {
      const unsigned k = order_key(row[i]);
      if (k == key && outer.in(k, i) && --left == 0) {
        sh.pivot_id = i;
        break;
      }
    }
  }
  __syncthreads();
  return sh.pivot_id;
}

// The first `k` tokens of `outer` in the order (1 <= k <= |outer|): radix select over the
// 32-bit key, 8 bits per pass, counts per digit aggregated per warp.
__device__ Cut select_by_count(const float* row, int V, int k, const Cut& outer, Shared& sh) {
  unsigned prefix = 0, mask = 0;
  int above = 0;
  const int lane = threadIdx.x & 31;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist_count[i] = 0;
    __syncthreads();
    for (int base = 0; base < V; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      int d = -1;
      if (i < V) {
        const unsigned key = order_key(row[i]);
        if ((key & mask) == prefix && outer.in(key, i)) d = static_cast<int>((key >> shift) & 255u);
      }
      if (__any_sync(kFull, d >= 0)) {
        const unsigned peers = __match_any_sync(kFull, d);
        if (d >= 0 && lane == __ffs(peers) - 1) atomicAdd(&sh.hist_count[d], __popc(peers));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0; --d) {
        if (above + sh.hist_count[d] >= k) break;
        above += sh.hist_count[d];
      }
      sh.sel_prefix = prefix | (static_cast<unsigned>(d) << shift);
      sh.sel_above = above;
      sh.sel_ties = sh.hist_count[d];
    }
    __syncthreads();
    prefix = sh.sel_prefix;
    above = sh.sel_above;
    mask |= 255u << shift;
  }
  const int ties = sh.sel_ties, rank = k - above;
  Cut c;
  c.key = prefix;
  c.id = rank >= ties ? INT_MAX : nth_tied_id(row, V, prefix, rank, outer, sh);
  return c;
}

// The smallest prefix of `outer` in the order whose fixed-point mass reaches `need`
// (1 <= need <= mass of outer): the same radix select, histogramming mass.
__device__ Cut select_by_mass(const float* row, int V, u64 need, double lmax, double inv_t,
                              const Cut& outer, Shared& sh) {
  unsigned prefix = 0, mask = 0;
  u64 above = 0;
  const int lane = threadIdx.x & 31;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int i = threadIdx.x; i < 256; i += kThreads) sh.hist_count[i] = 0, sh.hist_mass[i] = 0;
    __syncthreads();
    for (int base = 0; base < V; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      int d = -1;
      u64 f = 0;
      if (i < V) {
        const float l = row[i];
        const unsigned key = order_key(l);
        if ((key & mask) == prefix && outer.in(key, i)) {
          d = static_cast<int>((key >> shift) & 255u);
          f = to_fx(weight(l, lmax, inv_t));
        }
      }
      if (__any_sync(kFull, d >= 0)) {
        const unsigned peers = __match_any_sync(kFull, d);
        u64 s = 0;
        for (int j = 0; j < 32; ++j) {
          const u64 o = __shfl_sync(kFull, f, j);
          if ((peers >> j) & 1u) s += o;
        }
        if (d >= 0 && lane == __ffs(peers) - 1) {
          atomicAdd(&sh.hist_mass[d], s);
          atomicAdd(&sh.hist_count[d], __popc(peers));
        }
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int d = 255;
      for (; d > 0; --d) {
        if (above + sh.hist_mass[d] >= need) break;
        above += sh.hist_mass[d];
      }
      sh.sel_prefix = prefix | (static_cast<unsigned>(d) << shift);
      sh.sel_above_mass = above;
      sh.sel_ties = sh.hist_count[d];
      sh.sel_tie_mass = sh.hist_mass[d];
    }
    __syncthreads();
    prefix = sh.sel_prefix;
    above = sh.sel_above_mass;
    mask |= 255u << shift;
  }
  // Every token with the pivot key has the same weight: take as many (lowest ids first) as
  // the mass still needs.
  const int ties = sh.sel_ties;
  const u64 tie_mass = sh.sel_tie_mass;
  int take = ties;
  if (ties > 0 && tie_mass > 0 && need > above) {
    const u64 w = tie_mass / static_cast<u64>(ties);
    const u64 c = (need - above + w - 1) / w;
    take = static_cast<int>(c < static_cast<u64>(ties) ? (c < 1 ? 1 : c) : ties);
  }
  Cut c;
  c.key = prefix;
  c.id = take >= ties ? INT_MAX : nth_tied_id(row, V, prefix, take, outer, sh);
  return c;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const SampleKernelParams p) {
  __shared__ Shared sh;
  const SampleRowDesc rd = p.rows[blockIdx.x];
  const int V = p.vocab;
  const int tid = static_cast<int>(threadIdx.x);
  float* row = p.logits + static_cast<long long>(rd.logit_row) * V;
  SampleResultDev* out = p.out + blockIdx.x;

  // 0. NaN / +inf logits: the model is broken (InternalError on the host).
  if (tid == 0) sh.bad_index = INT_MAX;
  __syncthreads();
  for (int i = tid; i < V; i += kThreads) {
    const float v = row[i];
    if (isnan(v) || v == INFINITY) atomicMin(&sh.bad_index, i);
  }
  __syncthreads();
  if (sh.bad_index != INT_MAX) {
    if (tid == 0) {
      out->status = kSampleBadLogit;
      out->bad_index = sh.bad_index;
      out->bad_value = row[sh.bad_index];
      out->token = -1;
      out->num_top = 0;
    }
    return;
  }

  // 1. logit_bias, min_tokens bans (edit ids are distinct: one thread each).
  for (int e = tid; e < rd.edit_n; e += kThreads) {
    const SampleEdit ed = p.edits[rd.edit_off + e];
    float l = row[ed.id];
    for (int b = 0; b < ed.bias_n; ++b) l = __fadd_rn(l, p.biases[ed.bias_off + b]);
    if (ed.ban) l = -INFINITY;
    row[ed.id] = l;
  }
  __syncthreads();

  // 2. penalties over the history counted into the dense scratch row.
  if (rd.count_slot >= 0) {
    int* cnt = p.counts + static_cast<long long>(rd.count_slot) * V;
    for (int i = tid; i < V; i += kThreads) cnt[i] = 0;
    __syncthreads();
    const std::int32_t* h = p.history + rd.hist_off;
    for (int j = tid; j < rd.prompt_n; j += kThreads) atomicOr(&cnt[h[j]], kSeenInPrompt);
    for (int j = tid; j < rd.output_n; j += kThreads) atomicAdd(&cnt[h[rd.prompt_n + j]], 1);
    __syncthreads();
    const bool rep = rd.repetition != 1.0f;
    const bool freq = rd.frequency != 0.0f || rd.presence != 0.0f;
    for (int i = tid; i < V; i += kThreads) {
      const int c = cnt[i];
      if (c == 0) continue;
      float l = row[i];
      if (rep) l = l > 0.0f ? __fdiv_rn(l, rd.repetition) : __fmul_rn(l, rd.repetition);
      const int oc = c & (kSeenInPrompt - 1);
      if (freq && oc > 0)
        l = __fsub_rn(l, __fadd_rn(__fmul_rn(rd.frequency, static_cast<float>(oc)), rd.presence));
      row[i] = l;
    }
    __syncthreads();
  }

  // 3. row max, lowest id on ties.
  {
    float best = -INFINITY;
    int bi = INT_MAX;
    for (int i = tid; i < V; i += kThreads) {
      const float v = row[i];
      if (bi == INT_MAX || v > best) best = v, bi = i;  // ids increase: keeps the lowest
    }
    auto better = [](float v, int i, float bv, int b) {
      return b == INT_MAX || (i != INT_MAX && (v > bv || (v == bv && i < b)));
    };
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, best, o);
      const int oi = __shfl_xor_sync(kFull, bi, o);
      if (better(ov, oi, best, bi)) best = ov, bi = oi;
    }
    if ((tid & 31) == 0) sh.warp_v[tid >> 5] = best, sh.warp_i[tid >> 5] = bi;
    __syncthreads();
    if (tid < 32) {
      best = sh.warp_v[tid];
      bi = sh.warp_i[tid];
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, best, o);
        const int oi = __shfl_xor_sync(kFull, bi, o);
        if (better(ov, oi, best, bi)) best = ov, bi = oi;
      }
      if (tid == 0) sh.argmax = bi, sh.lmax = best;
    }
    __syncthreads();
  }
  if (!isfinite(sh.lmax)) {
    if (tid == 0) {
      out->status = kSampleAllBanned;
      out->token = -1;
      out->num_top = 0;
    }
    return;
  }
  const double lmax = sh.lmax;

  // Logprobs: log_softmax of the row after steps 1-2 (before temperature). Always: every
  // sampled token's logprob is recorded (the quality guardrail), as runtime/sampler.cpp does.
  double log_z = 0.0;
  {
    double z = 0.0;
    for (int i = tid; i < V; i += kThreads) z += exp(static_cast<double>(row[i]) - lmax);
    z = cub::BlockReduce<double, kThreads>(sh.cub.red_d).Sum(z);
    if (tid == 0) sh.log_z = log(z);
    __syncthreads();
    log_z = sh.log_z;
  }
  if (rd.logprobs > 0) {
    const Cut c = select_by_count(row, V, rd.logprobs, Cut{}, sh);
    if (tid == 0) sh.ntop = 0;
    __syncthreads();
    for (int i = tid; i < V; i += kThreads)
      if (c.in(order_key(row[i]), i)) {
        const int slot = atomicAdd(&sh.ntop, 1);
        if (slot < kMaxDeviceLogprobs) sh.top_ids[slot] = i;
      }
    __syncthreads();
    if (tid == 0) {
      const int n = min(sh.ntop, kMaxDeviceLogprobs);
      for (int a = 1; a < n; ++a) {  // insertion sort: value desc, id asc
        const int id = sh.top_ids[a];
        const float v = row[id];
        int b = a - 1;
        for (; b >= 0; --b) {
          const float w = row[sh.top_ids[b]];
          if (w > v || (w == v && sh.top_ids[b] < id)) break;
          sh.top_ids[b + 1] = sh.top_ids[b];
        }
        sh.top_ids[b + 1] = id;
      }
      out->num_top = n;
      for (int a = 0; a < n; ++a) {
        out->top_id[a] = sh.top_ids[a];
        out->top_logprob[a] =
            static_cast<float>(static_cast<double>(row[sh.top_ids[a]]) - lmax - log_z);
      }
    }
  } else if (tid == 0) {
    out->num_top = 0;
  }

  // 4-5. greedy, or truncation and the draw.
  int token = sh.argmax;
  if (rd.temperature != 0.0f) {
    const double inv_t = 1.0 / static_cast<double>(rd.temperature);
    Cut ck, cp;
    if (rd.top_k > 0) ck = select_by_count(row, V, rd.top_k, Cut{}, sh);
    if (rd.top_p < 1.0f) {
      u64 t = 0;
      for (int i = tid; i < V; i += kThreads) {
        const float l = row[i];
        if (ck.in(order_key(l), i)) t += to_fx(weight(l, lmax, inv_t));
      }
      t = cub::BlockReduce<u64, kThreads>(sh.cub.red_u).Sum(t);
      if (tid == 0) sh.total = t;
      __syncthreads();
      const u64 total = sh.total;
      double nd = ceil(static_cast<double>(rd.top_p) * static_cast<double>(total));
      u64 need = nd < 1.0 ? 1ull : static_cast<u64>(nd);
      if (need > total) need = total;
      cp = select_by_mass(row, V, need, lmax, inv_t, ck, sh);
    }
    const double min_w = static_cast<double>(rd.min_p);  // min_p * w(argmax), w(argmax) = 1
    const bool use_min_p = rd.min_p > 0.0f;
    int lo, hi;
    chunk_of(V, lo, hi);
    u64 s = 0;
    for (int i = lo; i < hi; ++i) {
      const float l = row[i];
      const unsigned k = order_key(l);
      if (!ck.in(k, i) || !cp.in(k, i)) continue;
      const double w = weight(l, lmax, inv_t);
      if (use_min_p && w < min_w) continue;
      s += to_fx(w);
    }
    u64 excl = 0, kept = 0;
    cub::BlockScan<u64, kThreads>(sh.cub.scan64).ExclusiveSum(s, excl, kept);
    if (tid == 0) sh.token = -1;
    __syncthreads();
    const u64 target = __umul64hi(kept, rd.u53 << 11);  // floor(kept * u), < kept
    if (s > 0 && excl <= target && target < excl + s) {
      u64 cum = excl;
      for (int i = lo; i < hi; ++i) {
        const float l = row[i];
        const unsigned k = order_key(l);
        if (!ck.in(k, i) || !cp.in(k, i)) continue;
        const double w = weight(l, lmax, inv_t);
        if (use_min_p && w < min_w) continue;
        const u64 f = to_fx(w);
        cum += f;
        if (f > 0 && cum > target) {
          sh.token = i;
          break;
        }
      }
    }
    __syncthreads();
    token = sh.token;
  }
  if (tid == 0) {
    out->status = token >= 0 ? kSampleOk : -1;
    out->token = token;
    out->bad_index = -1;
    out->logprob =
        token >= 0 ? static_cast<float>(static_cast<double>(row[token]) - lmax - log_z) : 0.0f;
    out->argmax = sh.argmax;
  }
}

}  // namespace

void launch_sample(const SampleKernelParams& p, cudaStream_t s) {
  if (p.num_rows == 0) return;
  if (p.vocab <= 0 || p.vocab > kMaxDeviceVocab)
    throw InternalError("device sampler: vocabulary of " + std::to_string(p.vocab) +
                        " outside (0, " + std::to_string(kMaxDeviceVocab) + "]");
  sample_kernel<<<p.num_rows, kThreads, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
