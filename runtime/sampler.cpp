#include "runtime/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "runtime/error.h"

namespace strata {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Descending by value, ties toward the lower id: the one order every rule uses.
template <class Values>
struct ByValueDesc {
  const Values& v;
  bool operator()(std::int32_t a, std::int32_t b) const {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  }
};

bool in_vocab(std::int32_t id, std::size_t vocab) {
  return id >= 0 && static_cast<std::size_t>(id) < vocab;
}

void apply_penalties(std::span<float> row, const SamplingParams& p,
                     const std::vector<std::int32_t>& prompt,
                     const std::vector<std::int32_t>& output) {
  const std::size_t vocab = row.size();
  for (auto id : prompt)
    if (!in_vocab(id, vocab))
      throw InternalError("sample_row: prompt token " + std::to_string(id) + " outside vocab " +
                          std::to_string(vocab));
  for (auto id : output)
    if (!in_vocab(id, vocab))
      throw InternalError("sample_row: output token " + std::to_string(id) + " outside vocab " +
                          std::to_string(vocab));

  if (p.repetition_penalty != 1.0f) {
    // HF/vLLM: each distinct token seen in prompt or output is penalised once.
    std::vector<std::int32_t> seen;
    seen.reserve(prompt.size() + output.size());
    seen.insert(seen.end(), prompt.begin(), prompt.end());
    seen.insert(seen.end(), output.begin(), output.end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (auto id : seen) {
      float& l = row[static_cast<std::size_t>(id)];
      l = l > 0.0f ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::vector<std::int32_t> out(output);
    std::sort(out.begin(), out.end());
    for (std::size_t i = 0; i < out.size();) {
      std::size_t j = i;
      while (j < out.size() && out[j] == out[i]) ++j;
      const auto count = static_cast<float>(j - i);
      row[static_cast<std::size_t>(out[i])] -= p.frequency_penalty * count + p.presence_penalty;
      i = j;
    }
  }
}

// Per-thread scratch reused across calls: a 128k-vocabulary row needs ~1.5 MB, and fresh
// allocations of that size cost page faults on every call.
struct Scratch {
  std::vector<double> w;                               // [vocab] softmax weights
  std::vector<std::int32_t> order;                     // [vocab] token ids being partially sorted
  std::vector<std::pair<double, std::int32_t>> pairs;  // [vocab] (weight, id) for top-p
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// `order` = 0 .. vocab-1 (reusing the scratch buffer).
std::vector<std::int32_t>& identity_order(std::size_t vocab) {
  auto& order = scratch().order;
  order.resize(vocab);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

// Indices of the `n` largest values of `v` (ties: lower id), sorted in that order.
template <class Values>
std::vector<std::int32_t> top_n(const Values& v, std::size_t vocab, std::size_t n) {
  auto& idx = identity_order(vocab);
  n = std::min(n, vocab);
  ByValueDesc<Values> cmp{v};
  const auto mid = idx.begin() + static_cast<std::ptrdiff_t>(n);
  if (n < vocab) std::nth_element(idx.begin(), mid, idx.end(), cmp);
  std::sort(idx.begin(), mid, cmp);
  return std::vector<std::int32_t>(idx.begin(), mid);
}

}  // namespace

void validate_sampling_params(const SamplingParams& p, int vocab_size) {
  auto bad = [](const char* param, const std::string& msg) { throw InvalidRequest(param, msg); };
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    bad("temperature", "temperature must be a finite number >= 0");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) bad("top_p", "top_p must be in (0, 1]");
  if (p.top_k < -1) bad("top_k", "top_k must be -1, 0 (disabled) or a positive count");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) bad("min_p", "min_p must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    bad("repetition_penalty", "repetition_penalty must be a finite number > 0");
  if (!std::isfinite(p.presence_penalty)) bad("presence_penalty", "must be finite");
  if (!std::isfinite(p.frequency_penalty)) bad("frequency_penalty", "must be finite");
  if (p.logprobs < -1) bad("logprobs", "logprobs must be >= 0");
  if (p.min_tokens < 0) bad("min_tokens", "min_tokens must be >= 0");
  const auto vocab = static_cast<std::size_t>(std::max(vocab_size, 0));
  for (const auto& [id, bias] : p.logit_bias) {
    if (!in_vocab(id, vocab))
      bad("logit_bias", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab_size) + ")");
    if (std::isnan(bias)) bad("logit_bias", "bias of token " + std::to_string(id) + " is NaN");
  }
  for (auto id : p.stop_token_ids)
    if (!in_vocab(id, vocab))
      bad("stop_token_ids", "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                                std::to_string(vocab_size) + ")");
}

namespace {

// Steps 1-2 of the contract on `row` in place, then its argmax (lowest id on ties), max and
// log-partition (fp64). Shared by sample_row and score_row so both see the same row.
struct Processed {
  std::size_t argmax = 0;
  double lmax = 0.0, log_z = 0.0;
};
Processed process_row(std::span<float> row, const SamplingParams& p,
                      const std::vector<std::int32_t>& prompt,
                      const std::vector<std::int32_t>& output,
                      const std::vector<std::int32_t>& eos_ids) {
  const std::size_t vocab = row.size();
  STRATA_CHECK(vocab > 0, "sample_row: empty logits row");
  validate_sampling_params(p, static_cast<int>(vocab));
  for (std::size_t i = 0; i < vocab; ++i)
    if (std::isnan(row[i]) || row[i] == std::numeric_limits<float>::infinity())
      throw InternalError("sample_row: non-finite logit " + std::to_string(row[i]) + " at token " +
                          std::to_string(i));

  // 1. logit_bias, then the min_tokens bans.
  for (const auto& [id, bias] : p.logit_bias) row[static_cast<std::size_t>(id)] += bias;
  if (output.size() < static_cast<std::size_t>(p.min_tokens)) {
    for (auto id : eos_ids)
      if (in_vocab(id, vocab)) row[static_cast<std::size_t>(id)] = kNegInf;
    for (auto id : p.stop_token_ids) row[static_cast<std::size_t>(id)] = kNegInf;
  }
  // 2. penalties.
  apply_penalties(row, p, prompt, output);

  // Row max (lowest id on ties) and the log-partition of the penalised row.
  Processed r;
  for (std::size_t i = 1; i < vocab; ++i)
    if (row[i] > row[r.argmax]) r.argmax = i;
  r.lmax = row[r.argmax];
  if (!std::isfinite(r.lmax))
    throw InvalidRequest("logit_bias", "every token of the vocabulary is banned or has -inf logit");
  // Always (one pass): the guardrail records every sampled token's logprob.
  double z = 0.0;
  for (std::size_t i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(row[i]) - r.lmax);
  r.log_z = std::log(z);
  return r;
}

}  // namespace

RowScore score_row(std::span<float> row, const SamplingParams& p,
                   const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& output,
                   const std::vector<std::int32_t>& eos_ids, std::int32_t token) {
  const Processed r = process_row(row, p, prompt, output, eos_ids);
  if (!in_vocab(token, row.size()))
    throw InternalError("score_row: token " + std::to_string(token) + " outside vocab " +
                        std::to_string(row.size()));
  RowScore s;
  s.argmax = static_cast<std::int32_t>(r.argmax);
  s.logprob = static_cast<double>(row[static_cast<std::size_t>(token)]) - r.lmax - r.log_z;
  return s;
}

namespace {

// exp(x) for x <= 0 in float, branch-free so that the loop below vectorizes (std::exp in fp64 is
// ~8 ns a call: 1 ms per 128k row, a second of the batcher's thread for a 1000-token prompt).
// 2^n e^r with n = round(x log2 e) by the 1.5 * 2^23 trick, r = x - n ln 2 in two parts
// (Cody-Waite), e^r by its Taylor series to degree 6 on |r| <= ln2 / 2 (relative error < 2e-7);
// x is clamped at -87 (e^-87 ≈ 1.6e-38, far below any sum this feeds, which is >= 1).
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  const float t = x * 1.44269504f + kShift;
  const float n = t - kShift;
  const float r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const auto e = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(t) -
                                           std::bit_cast<std::uint32_t>(kShift));
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(p) + e * (1 << 23));
}

// sum_i e^(x_i - shift) (every x_i <= shift): 16 float lanes over blocks of 256 elements, each
// block's lanes added into an fp64 total (no lane sums more than 16 values below 1).
double sum_exp_shifted(std::span<const float> x, float shift) {
  constexpr std::size_t kLanes = 16, kBlock = 256;
  const std::size_t n = x.size();
  double total = 0.0;
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float acc[kLanes] = {};
    for (std::size_t j = 0; j < kBlock; j += kLanes)
      for (std::size_t k = 0; k < kLanes; ++k) acc[k] += exp_nonpositive(x[i + j + k] - shift);
    double b = 0.0;
    for (const float a : acc) b += a;
    total += b;
  }
  for (; i < n; ++i) total += exp_nonpositive(x[i] - shift);
  return total;
}

// One pass, 16 lanes, no branch (CMakeLists.txt builds this file with -fno-trapping-math so
// that the selects vectorize): the max and its first id, whether every value is finite (NaN and
// +inf fail `v < inf`), and how many values exceed `pivot`.
struct RowScan {
  float max = 0.0f;
  std::int32_t argmax = 0;
  bool finite = true;
  int above = 0;
};
RowScan scan_row(std::span<const float> x, float pivot) {
  constexpr std::size_t kLanes = 16;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::size_t n = x.size();
  float m[kLanes];
  std::int32_t id[kLanes];
  int ok[kLanes], above[kLanes];
  for (std::size_t k = 0; k < kLanes; ++k) m[k] = -kInf, id[k] = 0, ok[k] = 1, above[k] = 0;
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t k = 0; k < kLanes; ++k) {
      const float v = x[i + k];
      const bool more = v > m[k];
      m[k] = more ? v : m[k];
      id[k] = more ? static_cast<std::int32_t>(i + k) : id[k];
      ok[k] &= v < kInf ? 1 : 0;
      above[k] += v > pivot ? 1 : 0;
    }
  RowScan r;
  r.max = -kInf;
  r.argmax = -1;
  auto fold = [&r](float v, std::int32_t at) {  // ties toward the lower id
    if (r.argmax < 0 || v > r.max || (v == r.max && at < r.argmax)) r.max = v, r.argmax = at;
  };
  for (std::size_t k = 0; k < kLanes; ++k) {
    if (i > 0) fold(m[k], id[k]);
    r.finite = r.finite && ok[k] != 0;
    r.above += above[k];
  }
  for (; i < n; ++i) {
    fold(x[i], static_cast<std::int32_t>(i));
    r.finite = r.finite && x[i] < kInf;
    r.above += x[i] > pivot ? 1 : 0;
  }
  return r;
}

}  // namespace

PromptScore score_prompt_row(std::span<const float> row, std::int32_t token, int n_top) {
  const std::size_t vocab = row.size();
  if (!in_vocab(token, vocab))
    throw InternalError("score_prompt_row: token " + std::to_string(token) + " outside vocab " +
                        std::to_string(vocab));
  // A prompt of a thousand tokens scores a thousand 128k rows on the batcher's thread: two
  // vectorized passes (scan_row, sum_exp_shifted), and for N > 1 alternatives one scalar pass
  // inserting into a short sorted list (a selection over the whole row would cost ~1 ms).
  const float x = row[static_cast<std::size_t>(token)];
  const RowScan scan = scan_row(row, x);
  if (!scan.finite) {
    for (std::size_t i = 0; i < vocab; ++i)
      if (!(row[i] < std::numeric_limits<float>::infinity()))
        throw InternalError("score_prompt_row: non-finite logit " + std::to_string(row[i]) +
                            " at token " + std::to_string(i));
  }
  if (!std::isfinite(scan.max)) throw InternalError("score_prompt_row: every logit is -inf");
  const std::size_t keep = std::min(vocab, static_cast<std::size_t>(std::max(n_top, 0)));
  std::vector<std::int32_t> best;  // ids, value descending, ties toward the lower id
  if (keep == 1) {
    best.push_back(scan.argmax);
  } else if (keep > 1) {
    best.reserve(keep + 1);
    for (std::size_t i = 0; i < vocab; ++i) {
      const float v = row[i];
      if (best.size() == keep && !(v > row[static_cast<std::size_t>(best.back())]))
        continue;  // (a later id with an equal value ranks below: ids come in ascending order)
      auto at = best.end();
      while (at != best.begin() && v > row[static_cast<std::size_t>(*(at - 1))]) --at;
      best.insert(at, static_cast<std::int32_t>(i));
      if (best.size() > keep) best.pop_back();
    }
  }
  const double log_z = static_cast<double>(scan.max) + std::log(sum_exp_shifted(row, scan.max));
  PromptScore out;
  out.logprob = static_cast<float>(static_cast<double>(x) - log_z);
  out.rank = 1 + scan.above;
  for (const auto id : best)
    out.top.push_back(
        {id, static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(id)]) - log_z)});
  return out;
}

SampleOutput sample_row(std::span<float> row, const SamplingParams& p,
                        const std::vector<std::int32_t>& prompt,
                        const std::vector<std::int32_t>& output,
                        const std::vector<std::int32_t>& eos_ids) {
  const std::size_t vocab = row.size();
  const Processed pr = process_row(row, p, prompt, output, eos_ids);
  const std::size_t argmax = pr.argmax;
  const double lmax = pr.lmax, log_z = pr.log_z;

  SampleOutput out;
  out.argmax = static_cast<std::int32_t>(argmax);
  if (p.logprobs > 0) {
    for (auto id : top_n(row, vocab, static_cast<std::size_t>(p.logprobs)))
      out.top.push_back(
          {id, static_cast<float>(static_cast<double>(row[static_cast<std::size_t>(id)]) - lmax -
                                  log_z)});
  }
  auto finish = [&](std::size_t token) {
    out.token = static_cast<std::int32_t>(token);
    out.logprob = static_cast<float>(static_cast<double>(row[token]) - lmax - log_z);
    return out;
  };

  // 4. greedy.
  if (p.temperature == 0.0f) return finish(argmax);

  // Temperature and softmax (unnormalised weights: every rule below is scale-invariant).
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  auto& w = scratch().w;
  w.resize(vocab);
  for (std::size_t i = 0; i < vocab; ++i)
    w[i] = std::exp((static_cast<double>(row[i]) - lmax) * inv_t);

  // `kept` stays empty while every token is kept (no top-k / top-p); otherwise it is the
  // kept set (any order: the draw sorts it by id).
  std::vector<std::int32_t> kept;
  bool restricted = false;
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    kept = top_n(w, vocab, static_cast<std::size_t>(p.top_k));
    restricted = true;
  }
  if (p.top_p < 1.0f) {
    if (!restricted) {
      // Weighted quickselect: halve the range holding the nucleus boundary with nth_element
      // (O(vocab) expected in total), then sort only the last small range.
      double total = 0.0;
      for (double x : w) total += x;
      const double need = static_cast<double>(p.top_p) * total;
      // (weight, id) pairs: contiguous, so the selection does not chase indices.
      auto& pr = scratch().pairs;
      pr.resize(vocab);
      for (std::size_t i = 0; i < vocab; ++i) pr[i] = {w[i], static_cast<std::int32_t>(i)};
      const auto pcmp = [](const std::pair<double, std::int32_t>& a,
                           const std::pair<double, std::int32_t>& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
      };
      auto at = [&](std::size_t i) { return pr.begin() + static_cast<std::ptrdiff_t>(i); };
      std::size_t lo = 0, hi = vocab;  // [0, lo) kept for sure, its mass `below` < need
      double below = 0.0;
      while (hi - lo > 256) {
        const std::size_t mid = lo + (hi - lo) / 2;
        std::nth_element(at(lo), at(mid), at(hi), pcmp);
        double m = 0.0;
        for (std::size_t i = lo; i < mid; ++i) m += pr[i].first;
        if (below + m >= need) {
          hi = mid;
        } else {
          below += m;
          lo = mid;
        }
      }
      std::sort(at(lo), at(hi), pcmp);
      std::size_t take = hi;  // rounding: the whole range when the sums fall short
      double mass = below;
      for (std::size_t i = lo; i < hi; ++i) {
        mass += pr[i].first;
        if (mass >= need) {
          take = i + 1;
          break;
        }
      }
      kept.resize(take);
      for (std::size_t i = 0; i < take; ++i) kept[i] = pr[i].second;
      restricted = true;
    } else {
      double total = 0.0;
      for (auto id : kept) total += w[static_cast<std::size_t>(id)];
      const double need = static_cast<double>(p.top_p) * total;
      double mass = 0.0;
      std::size_t take = kept.size();
      for (std::size_t i = 0; i < kept.size(); ++i) {
        mass += w[static_cast<std::size_t>(kept[i])];
        if (mass >= need) {
          take = i + 1;
          break;
        }
      }
      kept.resize(take);
    }
  }
  // min_p: relative to the most likely token (weight 1 at argmax), which every set keeps.
  const double min_w = static_cast<double>(p.min_p) * w[argmax];
  if (restricted && p.min_p > 0.0f)  // `kept` is not in probability order after top-p
    std::erase_if(kept, [&](std::int32_t id) { return w[static_cast<std::size_t>(id)] < min_w; });

  // 5. the draw, in vocabulary order over the kept set.
  const double u = sample_uniform(p.seed, output.size());
  if (restricted && kept.size() * 16 >= vocab) {
    // A large kept set: drop the rest by zeroing its weights and scan the whole row below
    // (cheaper than sorting the kept ids).
    auto& mark = scratch().order;
    mark.assign(vocab, 0);
    for (auto id : kept) mark[static_cast<std::size_t>(id)] = 1;
    for (std::size_t i = 0; i < vocab; ++i)
      if (!mark[i]) w[i] = 0.0;
    restricted = false;
  }
  if (restricted) {
    std::sort(kept.begin(), kept.end());
    double kept_mass = 0.0;
    for (auto id : kept) kept_mass += w[static_cast<std::size_t>(id)];
    const double target = u * kept_mass;
    double cum = 0.0;
    std::size_t last_positive = argmax;
    for (auto id : kept) {
      const double x = w[static_cast<std::size_t>(id)];
      cum += x;
      if (x > 0.0) last_positive = static_cast<std::size_t>(id);
      if (cum > target && x > 0.0) return finish(static_cast<std::size_t>(id));
    }
    return finish(last_positive);  // u * mass rounded up to mass
  }
  const bool use_min_p = p.min_p > 0.0f;  // (already applied when a kept set was built)
  double kept_mass = 0.0;
  for (std::size_t i = 0; i < vocab; ++i)
    if (!use_min_p || w[i] >= min_w) kept_mass += w[i];
  const double target = u * kept_mass;
  double cum = 0.0;
  std::size_t last_positive = argmax;
  for (std::size_t i = 0; i < vocab; ++i) {
    if (use_min_p && w[i] < min_w) continue;
    cum += w[i];
    if (w[i] > 0.0) last_positive = i;
    if (cum > target && w[i] > 0.0) return finish(i);
  }
  return finish(last_positive);
}

}  // namespace strata
