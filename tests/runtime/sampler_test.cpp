#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "runtime/error.h"

namespace strata {
namespace {

const std::vector<std::int32_t> kNone;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

SampleOutput sample(std::vector<float> row, const SamplingParams& p,
                    const std::vector<std::int32_t>& prompt = kNone,
                    const std::vector<std::int32_t>& output = kNone,
                    const std::vector<std::int32_t>& eos = kNone) {
  return sample_row(row, p, prompt, output, eos);
}

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double x : probs) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

std::vector<double> log_softmax(const std::vector<float>& row) {
  double m = -INFINITY, z = 0;
  for (float x : row) m = std::max(m, static_cast<double>(x));
  for (float x : row) z += std::exp(x - m);
  std::vector<double> out;
  for (float x : row) out.push_back(x - m - std::log(z));
  return out;
}

// Samples `n` seeds (output index 0) and returns token -> count.
std::map<std::int32_t, int> histogram(const std::vector<float>& row, SamplingParams p, int n) {
  std::map<std::int32_t, int> h;
  for (int s = 0; s < n; ++s) {
    p.seed = static_cast<std::uint64_t>(s) * 7919 + 13;
    ++h[sample(row, p).token];
  }
  return h;
}

// Support equals `expect` (token -> probability, renormalised inside) and each empirical
// frequency is within 5 binomial standard deviations of it.
void expect_distribution(const std::map<std::int32_t, int>& h,
                         std::map<std::int32_t, double> expect, int n) {
  double total = 0;
  for (auto& [t, q] : expect) total += q;
  std::set<std::int32_t> support, want;
  for (auto& [t, c] : h) support.insert(t);
  for (auto& [t, q] : expect) want.insert(t);
  EXPECT_EQ(support, want);
  for (auto& [t, q] : expect) {
    const double pr = q / total;
    const double sd = std::sqrt(n * pr * (1 - pr));
    const auto it = h.find(t);
    const double got = it == h.end() ? 0 : it->second;
    EXPECT_NEAR(got, n * pr, 5 * sd + 1) << "token " << t;
  }
}

TEST(Sampler, GreedyTakesLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(sample({1, 3, 3, 2}, p).token, 1);
  EXPECT_EQ(sample({5, 1, 5}, p).token, 0);
  // Greedy ignores the truncation parameters.
  p.top_k = 1;
  p.top_p = 0.1f;
  EXPECT_EQ(sample({0, 2, 7, 7}, p).token, 2);
}

TEST(Sampler, LogprobsAreLogSoftmaxBeforeTemperatureWithTopNDescending) {
  const std::vector<float> row = {0.0f, 1.0f, 2.0f, 3.0f, 2.0f, -1.0f};
  const auto ls = log_softmax(row);
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 3;
  auto o = sample(row, p);
  EXPECT_EQ(o.token, 3);
  EXPECT_NEAR(o.logprob, ls[3], 1e-6);
  ASSERT_EQ(o.top.size(), 3u);
  // 2 and 4 tie: the lower id comes first.
  EXPECT_EQ(o.top[0].token, 3);
  EXPECT_EQ(o.top[1].token, 2);
  EXPECT_EQ(o.top[2].token, 4);
  for (const auto& t : o.top) EXPECT_NEAR(t.logprob, ls[static_cast<std::size_t>(t.token)], 1e-6);
  // Hand value: log_softmax(3) = 3 - log(1 + e + 2e^2 + e^3 + e^-1).
  const double z = 1 + std::exp(1.0) + 2 * std::exp(2.0) + std::exp(3.0) + std::exp(-1.0);
  EXPECT_NEAR(o.logprob, 3 - std::log(z), 1e-6);

  // Sampled tokens report the same (temperature-independent) logprob.
  p.temperature = 0.3f;
  p.logprobs = 0;
  for (std::uint64_t s = 0; s < 20; ++s) {
    p.seed = s;
    o = sample(row, p);
    EXPECT_TRUE(o.top.empty());
    EXPECT_NEAR(o.logprob, ls[static_cast<std::size_t>(o.token)], 1e-6);
  }
  // More alternatives than the vocabulary: all of them.
  p.logprobs = 50;
  EXPECT_EQ(sample(row, p).top.size(), row.size());
  // No logprobs requested: no alternatives.
  p.logprobs = -1;
  EXPECT_TRUE(sample(row, p).top.empty());
}

TEST(Sampler, ArgmaxAndLogprobAreRecordedWhateverTheRequestAsked) {
  // The quality guardrail records both for every sampled token (logprobs -1 included).
  const std::vector<float> row = {0.5f, 2.0f, 1.0f, 2.0f};
  const auto ls = log_softmax(row);
  SamplingParams p;
  p.logprobs = -1;
  p.temperature = 1.0f;
  for (std::uint64_t s = 0; s < 20; ++s) {
    p.seed = s;
    const auto o = sample(row, p);
    EXPECT_EQ(o.argmax, 1);  // 1 and 3 tie: the lower id
    EXPECT_NEAR(o.logprob, ls[static_cast<std::size_t>(o.token)], 1e-6);
    EXPECT_TRUE(o.top.empty());
  }
  // The argmax is of the processed row (after logit_bias and penalties).
  p.logit_bias = {{3, 0.5f}};
  EXPECT_EQ(sample(row, p).argmax, 3);
}

TEST(Sampler, ScoreRowIsTheSamplersRowWithoutTheDraw) {
  // Same processing as sample_row: bias, min_tokens bans, penalties over the history.
  const std::vector<float> row = {1.0f, 3.0f, 2.5f, 0.0f};
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  p.min_tokens = 2;
  const std::vector<std::int32_t> prompt = {1}, eos = {2};
  for (std::size_t k = 0; k < 3; ++k) {
    const std::vector<std::int32_t> history(k, 3);
    std::vector<float> a(row);
    const auto so = sample_row(a, p, prompt, history, eos);
    for (std::int32_t t = 0; t < 4; ++t) {
      std::vector<float> c(row);
      const RowScore rs = score_row(c, p, prompt, history, eos, t);
      EXPECT_EQ(rs.argmax, so.argmax) << k;
      if (t == so.token) {
        EXPECT_NEAR(rs.logprob, so.logprob, 1e-6) << k;
      }
    }
    // While min_tokens bans EOS (id 2), the penalised 1 (3 / 2 = 1.5) loses to 2.5 only after.
    EXPECT_EQ(so.argmax, k < 2 ? 1 : 2) << k;
  }
  std::vector<float> c(row);
  EXPECT_THROW(score_row(c, p, prompt, {}, eos, 4), InternalError);
}

TEST(Sampler, LogitBiasIsAddedBeforeEverything) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{0, 2.5f}, {3, -1.0f}};
  std::vector<float> row = {1.0f, 3.0f, 0.0f, 3.2f};
  auto o = sample_row(row, p, kNone, kNone, kNone);
  EXPECT_EQ(o.token, 0);
  EXPECT_FLOAT_EQ(row[0], 3.5f);
  EXPECT_FLOAT_EQ(row[1], 3.0f);
  EXPECT_FLOAT_EQ(row[3], 2.2f);
  // A -100 bias removes a token from sampling in practice.
  p.temperature = 1;
  p.logit_bias = {{1, -100.0f}};
  const auto h = histogram({0.0f, 0.0f}, p, 200);
  EXPECT_EQ(h.count(1), 0u);
}

TEST(Sampler, MinTokensBansEosAndStopTokenIdsUntilReached) {
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  p.stop_token_ids = {1};
  const std::vector<std::int32_t> eos = {0, 4};
  std::vector<float> row = {9.0f, 8.0f, 1.0f, 2.0f, 7.0f};
  std::vector<std::int32_t> out = {3};
  auto o = sample_row(row, p, kNone, out, eos);
  EXPECT_EQ(o.token, 3);
  EXPECT_EQ(row[0], kNegInf);
  EXPECT_EQ(row[1], kNegInf);
  EXPECT_EQ(row[4], kNegInf);
  EXPECT_EQ(row[2], 1.0f);
  // Reached: nothing banned.
  out = {3, 2};
  row = {9.0f, 8.0f, 1.0f, 2.0f, 7.0f};
  EXPECT_EQ(sample_row(row, p, kNone, out, eos).token, 0);
  EXPECT_EQ(row[1], 8.0f);
  // Every token banned: a client error, not a crash.
  p.min_tokens = 5;
  p.stop_token_ids = {1, 2, 3};
  EXPECT_THROW(sample({1.0f, 1.0f, 1.0f, 1.0f, 1.0f}, p, kNone, out, eos), InvalidRequest);
}

TEST(Sampler, RepetitionPenaltyOncePerDistinctTokenOverPromptAndOutput) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  std::vector<float> row = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
  const std::vector<std::int32_t> prompt = {0, 1, 0, 4};
  const std::vector<std::int32_t> out = {0, 3, 3};
  sample_row(row, p, prompt, out, kNone);
  EXPECT_FLOAT_EQ(row[0], 1.0f);   // positive: divided, once though seen three times
  EXPECT_FLOAT_EQ(row[1], -4.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(row[2], 1.0f);   // unseen
  EXPECT_FLOAT_EQ(row[3], 0.25f);  // seen in output only
  EXPECT_FLOAT_EQ(row[4], 0.0f);   // zero stays zero
}

TEST(Sampler, FrequencyAndPresencePenaltiesOverOutputOnly) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> row = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<std::int32_t> prompt = {0, 0, 0};
  const std::vector<std::int32_t> out = {2, 2, 3, 2};
  sample_row(row, p, prompt, out, kNone);
  EXPECT_FLOAT_EQ(row[0], 1.0f);                       // prompt tokens are not counted
  EXPECT_FLOAT_EQ(row[2], 1.0f - (0.5f * 3 + 0.25f));  // count 3
  EXPECT_FLOAT_EQ(row[3], 1.0f - (0.5f * 1 + 0.25f));  // count 1
  // Repetition first, then frequency/presence: 2 -> 2/2 = 1 -> 1 - 0.75 = 0.25.
  p.repetition_penalty = 2.0f;
  row = {0.0f, 0.0f, 0.0f, 2.0f};
  sample_row(row, p, prompt, out, kNone);
  EXPECT_FLOAT_EQ(row[3], 0.25f);
}

TEST(Sampler, DrawIsFirstTokenInVocabOrderPastUTimesMass) {
  const std::vector<double> probs = {0.1, 0.3, 0.2, 0.4};
  const auto row = log_of(probs);
  SamplingParams p;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    for (std::size_t index = 0; index < 3; ++index) {
      p.seed = seed;
      const std::vector<std::int32_t> out(index, 2);
      const double u = sample_uniform(seed, index);
      double cum = 0;
      std::int32_t want = -1;
      for (std::size_t i = 0; i < probs.size() && want < 0; ++i)
        if ((cum += probs[i]) > u) want = static_cast<std::int32_t>(i);
      // Close calls at a boundary may round either way; the rest must match exactly.
      double edge = 1;
      cum = 0;
      for (double q : probs) edge = std::min(edge, std::abs((cum += q) - u));
      if (edge < 1e-6) continue;
      EXPECT_EQ(sample(row, p, kNone, out).token, want) << "seed " << seed << " index " << index;
    }
  }
}

TEST(Sampler, SeedsReproduceAndDiffer) {
  std::vector<float> row(64, 0.0f);  // uniform over 64 tokens
  SamplingParams p;
  p.seed = 42;
  const auto a = sample(row, p).token;
  EXPECT_EQ(sample(row, p).token, a);
  std::set<std::int32_t> by_seed, by_index;
  for (std::uint64_t s = 0; s < 16; ++s) {
    p.seed = s;
    by_seed.insert(sample(row, p).token);
  }
  EXPECT_GT(by_seed.size(), 8u);
  p.seed = 42;
  for (std::size_t i = 0; i < 16; ++i)
    by_index.insert(sample(row, p, kNone, std::vector<std::int32_t>(i, 1)).token);
  EXPECT_GT(by_index.size(), 8u);
}

TEST(Sampler, TemperatureScalesTheDistribution) {
  const std::vector<float> row = {0.0f, 1.0f, -0.5f};
  constexpr int n = 20000;
  for (float t : {1.0f, 0.5f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    std::map<std::int32_t, double> want;
    for (std::int32_t i = 0; i < 3; ++i) want[i] = std::exp(row[static_cast<std::size_t>(i)] / t);
    expect_distribution(histogram(row, p, n), want, n);
  }
  // Sanity of the tolerance: T = 0.5 is measurably sharper than T = 1.
  SamplingParams p;
  p.temperature = 0.5f;
  const auto sharp = histogram(row, p, n);
  p.temperature = 1.0f;
  const auto flat = histogram(row, p, n);
  EXPECT_GT(sharp.at(1), flat.at(1) + 1000);
}

TEST(Sampler, TopKKeepsTheKLargestTiesByLowerId) {
  // probs 0.3 0.1 0.2 0.2 0.2: top-3 is {0, 2, 3} (2, 3, 4 tie; lower ids win).
  const auto row = log_of({0.3, 0.1, 0.2, 0.2, 0.2});
  SamplingParams p;
  p.top_k = 3;
  constexpr int n = 20000;
  expect_distribution(histogram(row, p, n), {{0, 0.3}, {2, 0.2}, {3, 0.2}}, n);
  p.top_k = 1;
  expect_distribution(histogram(row, p, 500), {{0, 1.0}}, 500);
  p.top_k = 100;  // larger than the vocabulary: no truncation
  expect_distribution(histogram(row, p, n), {{0, 0.3}, {1, 0.1}, {2, 0.2}, {3, 0.2}, {4, 0.2}}, n);
}

TEST(Sampler, TopPKeepsExactlyTheNucleus) {
  // Descending: 0 (0.4), 2 (0.25), 3 (0.15), 1 (0.1), 4 (0.1).
  const auto row = log_of({0.4, 0.1, 0.25, 0.15, 0.1});
  SamplingParams p;
  constexpr int n = 20000;
  p.top_p = 0.7f;  // 0.4 + 0.25 < 0.7 <= 0.8
  expect_distribution(histogram(row, p, n), {{0, 0.4}, {2, 0.25}, {3, 0.15}}, n);
  p.top_p = 0.85f;  // needs one of the tied 0.1s: the lower id (1)
  expect_distribution(histogram(row, p, n), {{0, 0.4}, {1, 0.1}, {2, 0.25}, {3, 0.15}}, n);
  p.top_p = 0.3f;  // the top token alone
  expect_distribution(histogram(row, p, 500), {{0, 1.0}}, 500);
  // After top-k the nucleus is taken over the renormalised top-k mass:
  // top-2 = {0, 2} (mass 0.65); 0.4 / 0.65 = 0.615 >= 0.6, so only token 0 stays.
  p.top_k = 2;
  p.top_p = 0.6f;
  expect_distribution(histogram(row, p, 500), {{0, 1.0}}, 500);
  p.top_p = 0.62f;
  expect_distribution(histogram(row, p, n), {{0, 0.4}, {2, 0.25}}, n);
}

TEST(Sampler, TopPOnALargeVocabularyMatchesAFullSort) {
  // 32k tokens with a spread of logits: the nucleus needs far more than the first chunk.
  const std::size_t vocab = 32768;
  std::vector<float> row(vocab);
  for (std::size_t i = 0; i < vocab; ++i)
    row[i] = static_cast<float>(static_cast<double>(splitmix64(i) >> 40) / (1 << 24) * 4.0);
  std::vector<double> w(vocab);
  double m = *std::max_element(row.begin(), row.end()), total = 0;
  for (std::size_t i = 0; i < vocab; ++i) total += (w[i] = std::exp(row[i] - m));
  std::vector<std::int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](auto a, auto b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  SamplingParams p;
  p.top_p = 0.9f;
  std::set<std::int32_t> nucleus;
  double mass = 0;
  for (auto id : order) {
    nucleus.insert(id);
    if ((mass += w[static_cast<std::size_t>(id)]) >= 0.9 * total) break;
  }
  ASSERT_GT(nucleus.size(), 1000u);
  ASSERT_LT(nucleus.size(), vocab - 1000);
  // The draw over the nucleus in vocabulary order, computed independently.
  std::vector<std::int32_t> kept(nucleus.begin(), nucleus.end());
  for (std::uint64_t seed = 0; seed < 100; ++seed) {
    p.seed = seed;
    const double u = sample_uniform(seed, 0) * mass;
    double cum = 0;
    std::int32_t want = -1;
    for (auto id : kept)
      if ((cum += w[static_cast<std::size_t>(id)]) > u) {
        want = id;
        break;
      }
    EXPECT_EQ(sample(row, p).token, want) << "seed " << seed;
  }
}

// A small kept set on a large vocabulary (the sorted-ids draw path), against brute force:
// top-k 20, then top-p 0.5 of the renormalised top-k mass, then min-p.
TEST(Sampler, SmallKeptSetOnALargeVocabularyMatchesBruteForce) {
  const std::size_t vocab = 4096;
  std::vector<float> row(vocab);
  for (std::size_t i = 0; i < vocab; ++i)
    row[i] = static_cast<float>(static_cast<double>(splitmix64(i + 77) >> 40) / (1 << 24) * 6.0);
  const double m = *std::max_element(row.begin(), row.end());
  std::vector<std::int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> w(vocab);
  for (std::size_t i = 0; i < vocab; ++i)
    w[i] = std::exp((row[i] - m) * (1.0 / static_cast<double>(0.7f)));
  std::sort(order.begin(), order.end(),
            [&](auto a, auto b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  order.resize(20);
  double topk_mass = 0;
  for (auto id : order) topk_mass += w[static_cast<std::size_t>(id)];
  std::vector<std::int32_t> kept;
  double mass = 0;
  for (auto id : order) {
    kept.push_back(id);
    if ((mass += w[static_cast<std::size_t>(id)]) >= 0.5 * topk_mass) break;
  }
  const double pmax = w[static_cast<std::size_t>(order[0])];
  std::erase_if(kept, [&](auto id) { return w[static_cast<std::size_t>(id)] < 0.3 * pmax; });
  ASSERT_GE(kept.size(), 2u);
  ASSERT_LT(kept.size(), 20u);
  std::sort(kept.begin(), kept.end());
  double kept_mass = 0;
  for (auto id : kept) kept_mass += w[static_cast<std::size_t>(id)];
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.top_p = 0.5f;
  p.min_p = 0.3f;
  std::set<std::int32_t> seen;
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    const double u = sample_uniform(seed, 0) * kept_mass;
    double cum = 0;
    std::int32_t want = -1;
    for (auto id : kept)
      if ((cum += w[static_cast<std::size_t>(id)]) > u) {
        want = id;
        break;
      }
    const auto got = sample(row, p).token;
    EXPECT_EQ(got, want) << "seed " << seed;
    seen.insert(got);
  }
  EXPECT_EQ(seen, std::set<std::int32_t>(kept.begin(), kept.end()));
}

TEST(Sampler, MinPDropsTokensBelowTheRelativeThreshold) {
  const auto row = log_of({0.5, 0.2, 0.04, 0.26});
  SamplingParams p;
  p.min_p = 0.1f;  // threshold 0.05: drops token 2
  constexpr int n = 20000;
  expect_distribution(histogram(row, p, n), {{0, 0.5}, {1, 0.2}, {3, 0.26}}, n);
  p.min_p = 0.5f;  // threshold 0.25: keeps 0 and 3
  expect_distribution(histogram(row, p, n), {{0, 0.5}, {3, 0.26}}, n);
  // With top-k applied first.
  p.top_k = 3;
  p.min_p = 0.45f;  // top-3 = {0, 3, 1}; threshold 0.225 drops 1
  expect_distribution(histogram(row, p, n), {{0, 0.5}, {3, 0.26}}, n);
  // Temperature changes the ratios min_p sees: T = 2 makes 0.2/0.5 -> sqrt(0.4) = 0.63.
  p.top_k = 0;
  p.min_p = 0.5f;
  p.temperature = 2.0f;
  expect_distribution(histogram(row, p, n),
                      {{0, std::sqrt(0.5)}, {1, std::sqrt(0.2)}, {3, std::sqrt(0.26)}}, n);
}

TEST(Sampler, RejectsBadParametersAndNonFiniteLogits) {
  SamplingParams p;
  p.logit_bias = {{7, 1.0f}};
  try {
    sample({0, 0, 0}, p);
    FAIL();
  } catch (const InvalidRequest& e) {
    EXPECT_EQ(e.param(), "logit_bias");
  }
  p = {};
  p.top_p = 0.0f;
  EXPECT_THROW(sample({0, 0}, p), InvalidRequest);
  p = {};
  p.temperature = -1;
  EXPECT_THROW(sample({0, 0}, p), InvalidRequest);
  p = {};
  p.stop_token_ids = {2};
  EXPECT_THROW(validate_sampling_params(p, 2), InvalidRequest);
  EXPECT_NO_THROW(validate_sampling_params(p, 3));
  p = {};
  EXPECT_THROW(sample({0, std::nanf("")}, p), InternalError);
  EXPECT_THROW(sample({0, 1}, p, {5}), InternalError);
  // -inf logits are legal (masked tokens) as long as one token remains.
  p.temperature = 0;
  EXPECT_EQ(sample({kNegInf, 1.0f, kNegInf}, p).token, 1);
}

// Prompt scoring (prompt logprobs) against a brute force over a 128k row with ties: the
// raw row's log-softmax (no sampling parameter applies), the token's 1-based rank, and the
// top-N in value order with ties toward the lower id, as sample_row's alternatives.
TEST(Sampler, PromptScoreMatchesBruteForceWithTies) {
  const int V = 128256;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> row(V);
  for (auto& x : row) x = std::round(d(rng) * 4.0f) / 4.0f;  // quarter steps: many ties
  row[777] = row[90000] = row[5] = 30.0f;                    // a three-way tie at the top
  double m = -INFINITY, z = 0.0;
  for (float x : row) m = std::max(m, static_cast<double>(x));
  for (float x : row) z += std::exp(static_cast<double>(x) - m);
  const double log_z = m + std::log(z);
  std::vector<std::int32_t> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return row[a] > row[b]; });
  for (const std::int32_t token : {5, 777, 90000, 1234, 64000}) {
    for (const int n : {0, 1, 5, 20}) {
      const PromptScore s = score_prompt_row(row, token, n);
      EXPECT_NEAR(s.logprob, static_cast<double>(row[token]) - log_z, 1e-5);
      const auto above =
          std::count_if(row.begin(), row.end(), [&](float x) { return x > row[token]; });
      EXPECT_EQ(s.rank, 1 + above);
      ASSERT_EQ(s.top.size(), static_cast<std::size_t>(n));
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(s.top[k].token, ids[k]) << "token " << token << " n " << n << " k " << k;
        EXPECT_NEAR(s.top[k].logprob, static_cast<double>(row[ids[k]]) - log_z, 1e-5);
      }
    }
  }
  EXPECT_EQ(score_prompt_row(row, 5, 3).top[0].token, 5);  // ties: lower id first
  EXPECT_EQ(score_prompt_row(row, 5, 3).top[1].token, 777);
  // Agrees with sample_row's logprob of the same token on the unprocessed row.
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  const SampleOutput g = sample(row, greedy);
  EXPECT_NEAR(score_prompt_row(row, g.token, 0).logprob, g.logprob, 1e-5);

  // Cost per row, printed, not asserted (docs/api.md "Prompt logprobs").
  const auto t0 = std::chrono::steady_clock::now();
  float sink = 0.0f;
  for (int i = 0; i < 50; ++i) sink += score_prompt_row(row, i, 5).logprob;
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / 50;
  std::printf("FIGURE sampler_prompt_score_128k_top5_us %.1f (sum %.1f)\n", us, sink);

  EXPECT_THROW(score_prompt_row(row, V, 0), InternalError);
  EXPECT_THROW(score_prompt_row(row, -1, 0), InternalError);
  row[9] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(score_prompt_row(row, 1, 0), InternalError);
  EXPECT_THROW(score_prompt_row(std::vector<float>(4, kNegInf), 1, 0), InternalError);
}

}  // namespace
}  // namespace strata
