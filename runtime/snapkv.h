// SnapKV scoring, pooling and selection, and the per-slot score rules of sparse layers, as
// pure functions: the CPU backend uses them and they are the oracle for the CUDA sparsity
// kernels (DESIGN.md section 3, docs/contracts.md, docs/sparsity-cpu.md).
//
// Conventions: positions and slots are token indices inside one sequence and one KV head;
// `scale` is 1/sqrt(head_dim); LSE is the natural log. Selections are returned as
// ascending indices; every tie breaks toward the lower index.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sparsity_profile.h"

namespace strata::snapkv {

// Attention mass the observation window gives each prompt key of one KV head:
//
//   S[i] = Σ_{w : L-α+w >= i} Σ_{h < group} exp(q[w,h]·k[i]·scale − lse[w,h]),  0 <= i < L
//
// (the window queries sit at positions L-α .. L-1 and see keys up to their own position).
// For sinks <= i < L-α this is DESIGN.md's S; sinks and window keys get the same sum over
// the queries that see them (used for their initial scores).
//   q:   [alpha][group][head_dim]  window queries after RoPE
//   k:   [L][head_dim]             the prompt's keys after RoPE
//   lse: [alpha][group]            natural-log LSE of each window query over keys 0..pos
//   S:   [L]                       output
// Requires 1 <= alpha <= L. window_scores accumulates in fp64 (the oracle);
// window_scores_f32 does the same arithmetic in fp32 (what a kernel does).
void window_scores(const float* q, const float* k, const double* lse, int L, int alpha, int group,
                   int head_dim, double scale, double* S);
void window_scores_f32(const float* q, const float* k, const float* lse, int L, int alpha,
                       int group, int head_dim, float scale, float* S);

// Centred stride-1 pooling over s (one value per index of the pooled range): out[i] pools
// s[j] for |j − i| <= kernel/2 and 0 <= j < s.size(). Positions outside the range do not
// count: max ignores them (pads with −inf), avg divides by the number of real positions.
std::vector<double> pool(std::span<const double> s, PoolKind kind, int kernel);

// Indices of the k largest values, ascending; equal values prefer the lower index.
// k is clamped to [0, v.size()].
std::vector<int> top_k(std::span<const double> v, int k);

// The prompt positions a sparse layer keeps when the prompt (length L > capacity) is
// compacted, ascending, with each kept position's initial score:
//   window:         [0, sinks) ∪ [L − (C − sinks), L)
//   snapkv, scored: [0, sinks) ∪ top_{C−α−sinks}(pool(S[sinks, L−α))) ∪ [L − α, L)
// Initial scores: a selected position gets S'/α (its pooled score, the mean probability
// per observation query); every other kept position gets S/α.
// S: [L] from window_scores. Throws InternalError when L <= C or the rule is not sparse.
struct Selection {
  std::vector<std::int32_t> positions;  // [C] ascending = slot order after compaction
  std::vector<float> scores;            // [C]
};
Selection select_prompt(std::span<const double> S, int L, const LayerRule& rule);

// One step of the decode score average: s ← (1 − 1/α)·s + (1/α)·p, fp32 (p = Σ_{h∈g} p_h).
inline float ema(float s, float p, int alpha) {
  const float lambda = 1.0f / static_cast<float>(alpha);
  return (1.0f - lambda) * s + lambda * p;
}

// `scored`, ring full, before writing a decode token: the ring's oldest token (slot
// C − r + ring_pos) either replaces the lowest-scored slot of [sinks, C − r) when its score
// is strictly higher (returns that slot; equal lowest scores prefer the lower slot) or is
// dropped (returns −1). scores: [C] of one KV head.
int resolve_leaver(std::span<const float> scores, const LayerRule& rule, int ring_pos);

// Live shrink of one KV head: the old slots kept, in their new slot order (result size
// min(valid, shrink_to)). Layout produced (ring_pos becomes 0):
//   [0, sinks)            the sinks
//   then                  the highest-scored older slots, in old slot order
//   last R slots          the R most recent tokens, oldest first
// R = min(ring, n − sinks) for `scored` (ring = α), n − sinks for `window` (every non-sink
// slot is ring), min(α, n − sinks) for `snapkv` (its last α appended/window slots are
// protected). "Older slots" are the non-sink slots outside those R; with a full ring the
// age order is the selected region [sinks, C − r) in slot order, then the ring from
// ring_pos; otherwise slot order is age order.
// scores: [valid] of one KV head (ignored for `window`).
std::vector<std::int32_t> shrink_order(std::span<const float> scores, int valid, int ring_pos,
                                       const LayerRule& rule, int shrink_to);

}  // namespace strata::snapkv
