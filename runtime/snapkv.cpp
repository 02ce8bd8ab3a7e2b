#include "runtime/snapkv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "runtime/error.h"

namespace strata::snapkv {

void window_scores(const float* q, const float* k, const double* lse, int L, int alpha, int group,
                   int head_dim, double scale, double* S) {
  STRATA_CHECK(alpha >= 1 && alpha <= L,
               "window " + std::to_string(alpha) + ", L " + std::to_string(L));
  const int first = L - alpha;  // position of window query 0
  // Keys outermost, queries inside: each key sums its own column (no cross-key reduction).
  // Per (key i, query row r = w * group + h): dot = Σ_d q[r][d]·k[i][d] in fp64, d ascending
  // from 0.0, then S[i] = Σ_r exp(dot·scale − lse[r]), r ascending. The dots of B query rows
  // are computed side by side (independent accumulators over a transposed copy of q) — the
  // same operations in the same order per dot, only interleaved, so the result is the same
  // bits as one dot at a time, several times faster.
  constexpr int B = 8;
  const int R = alpha * group, Rp = (R + B - 1) / B * B;
  std::vector<double> qt(static_cast<std::size_t>(head_dim) * Rp, 0.0),
      dots(static_cast<std::size_t>(Rp));
  for (int r = 0; r < R; ++r)
    for (int d = 0; d < head_dim; ++d)
      qt[static_cast<std::size_t>(d) * Rp + r] = q[static_cast<std::size_t>(r) * head_dim + d];
  for (int i = 0; i < L; ++i) {
    const float* ki = k + static_cast<std::size_t>(i) * head_dim;
    const int r0 = std::max(0, i - first) * group;  // rows of the queries that see key i
    for (int rb = r0 / B * B; rb < R; rb += B) {
      double acc[B] = {};
      const double* qb = qt.data() + rb;
      for (int d = 0; d < head_dim; ++d) {
        const double kd = ki[d];
        const double* qd = qb + static_cast<std::size_t>(d) * Rp;
        for (int j = 0; j < B; ++j) acc[j] += qd[j] * kd;
      }
      for (int j = 0; j < B; ++j) dots[static_cast<std::size_t>(rb + j)] = acc[j];
    }
    double sum = 0.0;
    for (int r = r0; r < R; ++r)
      sum += std::exp(dots[static_cast<std::size_t>(r)] * scale - lse[r]);
    S[i] = sum;
  }
}

void window_scores_f32(const float* q, const float* k, const float* lse, int L, int alpha,
                       int group, int head_dim, float scale, float* S) {
  STRATA_CHECK(alpha >= 1 && alpha <= L,
               "window " + std::to_string(alpha) + ", L " + std::to_string(L));
  const int first = L - alpha;
  for (int i = 0; i < L; ++i) {
    const float* ki = k + static_cast<std::size_t>(i) * head_dim;
    float sum = 0.0f;
    for (int w = std::max(0, i - first); w < alpha; ++w) {
      for (int h = 0; h < group; ++h) {
        const float* qw = q + (static_cast<std::size_t>(w) * group + h) * head_dim;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += qw[d] * ki[d];
        sum += std::exp(dot * scale - lse[static_cast<std::size_t>(w) * group + h]);
      }
    }
    S[i] = sum;
  }
}

std::vector<double> pool(std::span<const double> s, PoolKind kind, int kernel) {
  STRATA_CHECK(kernel >= 1 && kernel % 2 == 1, "pool kernel " + std::to_string(kernel));
  const int n = static_cast<int>(s.size());
  const int half = kernel / 2;
  std::vector<double> out(s.size());
  for (int i = 0; i < n; ++i) {
    const int lo = std::max(0, i - half), hi = std::min(n - 1, i + half);
    if (kind == PoolKind::kMax) {
      double m = -std::numeric_limits<double>::infinity();
      for (int j = lo; j <= hi; ++j) m = std::max(m, s[j]);
      out[i] = m;
    } else {
      double sum = 0.0;
      for (int j = lo; j <= hi; ++j) sum += s[j];
      out[i] = sum / (hi - lo + 1);
    }
  }
  return out;
}

std::vector<int> top_k(std::span<const double> v, int k) {
  const int n = static_cast<int>(v.size());
  k = std::clamp(k, 0, n);
  std::vector<int> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  // Strict weak order: larger value first, then lower index.
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return v[a] != v[b] ? v[a] > v[b] : a < b; });
  idx.resize(static_cast<std::size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

Selection select_prompt(std::span<const double> S, int L, const LayerRule& rule) {
  STRATA_CHECK(rule.sparse(), "select_prompt on a full layer");
  const int C = rule.capacity, s = rule.sinks, a = rule.window;
  STRATA_CHECK(L > C && static_cast<int>(S.size()) >= L,
               "L " + std::to_string(L) + " must exceed capacity " + std::to_string(C));
  STRATA_CHECK(C >= s + a + 1, "capacity " + std::to_string(C) + " < sinks + window + 1");
  Selection sel;
  sel.positions.reserve(static_cast<std::size_t>(C));
  sel.scores.reserve(static_cast<std::size_t>(C));
  auto keep_raw = [&](int i) {
    sel.positions.push_back(i);
    sel.scores.push_back(static_cast<float>(S[i] / a));
  };
  for (int i = 0; i < s; ++i) keep_raw(i);
  if (rule.policy == Policy::kWindow) {
    for (int i = L - (C - s); i < L; ++i) keep_raw(i);
    return sel;
  }
  const auto range = S.subspan(static_cast<std::size_t>(s), static_cast<std::size_t>(L - a - s));
  const auto pooled = pool(range, rule.pool, rule.pool_kernel);
  for (int j : top_k(pooled, C - a - s)) {
    sel.positions.push_back(s + j);
    sel.scores.push_back(static_cast<float>(pooled[j] / a));
  }
  for (int i = L - a; i < L; ++i) keep_raw(i);
  return sel;
}

int resolve_leaver(std::span<const float> scores, const LayerRule& rule, int ring_pos) {
  const int C = rule.capacity, r = rule.ring, s = rule.sinks;
  STRATA_CHECK(rule.policy == Policy::kScored && r > 0 && C - r > s &&
                   static_cast<int>(scores.size()) >= C && ring_pos >= 0 && ring_pos < r,
               "resolve_leaver: bad rule or ring_pos");
  int lowest = s;
  for (int j = s + 1; j < C - r; ++j)
    if (scores[j] < scores[lowest]) lowest = j;
  const float leaver = scores[C - r + ring_pos];
  return leaver > scores[lowest] ? lowest : -1;
}

std::vector<std::int32_t> shrink_order(std::span<const float> scores, int valid, int ring_pos,
                                       const LayerRule& rule, int shrink_to) {
  STRATA_CHECK(rule.sparse(), "shrink on a full layer");
  const int s = rule.sinks;
  STRATA_CHECK(shrink_to > s && valid >= 0, "shrink_to " + std::to_string(shrink_to) +
                                                " must exceed sinks " + std::to_string(s));
  const bool ring_full = rule.ring > 0 && valid == rule.capacity;
  const int sinks = std::min(s, valid);
  // Non-sink slots, oldest first.
  std::vector<std::int32_t> aged;
  if (ring_full) {
    const int C = rule.capacity, r = rule.ring;
    for (int j = sinks; j < C - r; ++j) aged.push_back(j);
    for (int j = 0; j < r; ++j) aged.push_back(C - r + (ring_pos + j) % r);
  } else {
    for (int j = sinks; j < valid; ++j) aged.push_back(j);
  }
  const int n = std::min(valid, shrink_to);
  const int others = n - sinks;  // non-sink slots that remain
  int recent = 0;
  switch (rule.policy) {
    case Policy::kWindow:
      recent = others;
      break;
    case Policy::kScored:
      recent = std::min(rule.ring, others);
      break;
    case Policy::kSnapKv:
      recent = std::min(rule.window, others);
      break;
    case Policy::kFull:
      break;
  }
  const int older = static_cast<int>(aged.size()) - recent;  // candidates: aged[0, older)
  std::vector<double> cand(static_cast<std::size_t>(older));
  if (rule.policy != Policy::kWindow) {
    STRATA_CHECK(static_cast<int>(scores.size()) >= valid, "shrink: scores shorter than valid");
    for (int j = 0; j < older; ++j) cand[j] = scores[aged[j]];
  }
  std::vector<std::int32_t> order;
  order.reserve(static_cast<std::size_t>(n));
  for (int j = 0; j < sinks; ++j) order.push_back(j);
  std::vector<std::int32_t> chosen;
  for (int j : top_k(cand, others - recent)) chosen.push_back(aged[j]);
  std::sort(chosen.begin(), chosen.end());
  order.insert(order.end(), chosen.begin(), chosen.end());
  order.insert(order.end(), aged.end() - recent, aged.end());
  return order;
}

}  // namespace strata::snapkv
