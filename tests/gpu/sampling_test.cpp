// Device sampler (cuda/sampling.h) against the CPU sampler (runtime/sampler.cpp, the
// oracle) on the same logits: exact for the deterministic parts (processed row, greedy,
// top_k = 1, logprobs and top-N, the seeded draw itself), distributions for the stochastic
// parts (support = the exactly truncated set, frequencies vs the truncated softmax),
// reproducibility, and the errors sample_row raises.
#include "cuda/sampling.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "runtime/error.h"
#include "runtime/sampler.h"
#include "tests/gpu/gpu_test_util.h"

namespace strata::cuda {
namespace {

using gputest::figure;
using gputest::parallel_for;

constexpr int kLlamaVocab = 128256;

// Rows of N(0, std) logits.
std::vector<float> random_rows(int rows, int vocab, double std, std::uint64_t seed) {
  std::vector<float> out(static_cast<std::size_t>(rows) * vocab);
  parallel_for(rows, [&](int r) {
    std::mt19937_64 rng(seed * 1000003 + static_cast<std::uint64_t>(r));
    std::normal_distribution<double> d(0.0, std);
    for (int i = 0; i < vocab; ++i)
      out[static_cast<std::size_t>(r) * vocab + i] = static_cast<float>(d(rng));
  });
  return out;
}

struct Case {
  SamplingParams p;
  std::vector<std::int32_t> prompt, output, eos;
};

struct DeviceRun {
  std::vector<SampleResultDev> res;
  std::vector<float> rows;  // the logits after the kernel (steps 1-2 applied in place)
  SampleBatch batch;
  double ms = 0.0;
};

// Row r of `logits` sampled with cases[r % cases.size()].
DeviceRun run_device(const std::vector<float>& logits, int vocab, const std::vector<Case>& cases,
                     int rows, DeviceSampler& sampler) {
  std::vector<SampleRequest> reqs;
  for (int r = 0; r < rows; ++r) {
    const Case& c = cases[static_cast<std::size_t>(r) % cases.size()];
    SampleRequest q;
    q.logit_row = r;
    q.params = &c.p;
    q.prompt = &c.prompt;
    q.output = &c.output;
    q.eos_ids = &c.eos;
    reqs.push_back(q);
  }
  DeviceRun out;
  out.batch = prepare_samples(reqs, vocab);
  gputest::DeviceArray<float> d(logits.size());
  CUDA_CHECK(
      cudaMemcpy(d.get(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CUDA_CHECK(cudaEventCreate(&e0));
  CUDA_CHECK(cudaEventCreate(&e1));
  CUDA_CHECK(cudaEventRecord(e0, nullptr));
  sampler.run(d.get(), vocab, out.batch, nullptr);
  CUDA_CHECK(cudaEventRecord(e1, nullptr));
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
  out.ms = ms;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  out.res.assign(sampler.results(), sampler.results() + rows);
  out.rows.resize(logits.size());
  CUDA_CHECK(
      cudaMemcpy(out.rows.data(), d.get(), logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

// Device vs sample_row on every row: the processed row bit for bit, the token, logprob and
// top-N within 1e-4 (ids equal). Returns the number of rows whose drawn token differs
// (stochastic rows: expected 0, see docs/sampling.md "CUDA" on fixed-point masses).
int compare_with_host(const std::vector<float>& logits, int vocab, const std::vector<Case>& cases,
                      int rows, const char* what, double* device_ms = nullptr) {
  DeviceSampler sampler;
  const DeviceRun dev = run_device(logits, vocab, cases, rows, sampler);
  if (device_ms) *device_ms = dev.ms;
  std::vector<SampleOutput> host(static_cast<std::size_t>(rows));
  std::vector<std::vector<float>> host_rows(static_cast<std::size_t>(rows));
  parallel_for(rows, [&](int r) {
    const Case& c = cases[static_cast<std::size_t>(r) % cases.size()];
    auto& row = host_rows[static_cast<std::size_t>(r)];
    row.assign(logits.begin() + static_cast<std::ptrdiff_t>(r) * vocab,
               logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * vocab);
    host[static_cast<std::size_t>(r)] = sample_row(row, c.p, c.prompt, c.output, c.eos);
  });
  int token_diff = 0;
  for (int r = 0; r < rows; ++r) {
    const Case& c = cases[static_cast<std::size_t>(r) % cases.size()];
    const SampleOutput got = finish_sample(dev.res[static_cast<std::size_t>(r)],
                                           dev.batch.rows[static_cast<std::size_t>(r)]);
    const SampleOutput& want = host[static_cast<std::size_t>(r)];
    SCOPED_TRACE(std::string(what) + " row " + std::to_string(r));
    EXPECT_EQ(0, std::memcmp(dev.rows.data() + static_cast<std::size_t>(r) * vocab,
                             host_rows[static_cast<std::size_t>(r)].data(),
                             static_cast<std::size_t>(vocab) * sizeof(float)))
        << "processed row differs from the host's";
    const bool deterministic = c.p.temperature == 0.0f || c.p.top_k == 1;
    if (deterministic)
      EXPECT_EQ(got.token, want.token);
    else if (got.token != want.token)
      ++token_diff;
    if (got.token < 0 || got.token >= vocab) {
      ADD_FAILURE() << "token " << got.token << " outside the vocabulary";
      continue;
    }
    {
      // The logprob of the token each side drew and the processed row's argmax: on every row,
      // whatever logprobs asks (the quality guardrail records them for every sampled token).
      const auto& hr = host_rows[static_cast<std::size_t>(r)];
      double mx = -INFINITY, z = 0.0;
      for (float v : hr) mx = std::max(mx, static_cast<double>(v));
      for (float v : hr) z += std::exp(static_cast<double>(v) - mx);
      const double lp =
          static_cast<double>(hr[static_cast<std::size_t>(got.token)]) - mx - std::log(z);
      EXPECT_NEAR(got.logprob, lp, 1e-4);
      EXPECT_EQ(got.argmax, want.argmax);
      if (got.token == want.token) {
        EXPECT_NEAR(got.logprob, want.logprob, 1e-4);
      }
    }
    if (c.p.logprobs >= 0) {
      EXPECT_EQ(got.top.size(), want.top.size());
      if (got.top.size() != want.top.size()) continue;
      for (std::size_t i = 0; i < want.top.size(); ++i) {
        EXPECT_EQ(got.top[i].token, want.top[i].token) << "top " << i;
        EXPECT_NEAR(got.top[i].logprob, want.top[i].logprob, 1e-4) << "top " << i;
      }
    } else {
      EXPECT_TRUE(got.top.empty());
    }
  }
  return token_diff;
}

TEST(GpuSampling, GreedyTopK1AndLogprobsMatchHost) {
  REQUIRE_GPU();
  const int rows = 16, V = kLlamaVocab;
  std::vector<float> logits = random_rows(rows, V, 3.0, 1);
  // Row 1: the maximum at three ids (lowest wins); row 2: every logit equal.
  for (int i : {500, 77, 90000}) logits[static_cast<std::size_t>(V) + i] = 50.0f;
  std::fill(logits.begin() + 2 * V, logits.begin() + 3 * V, 1.25f);
  std::vector<Case> cases(4);
  cases[0].p.temperature = 0.0f;
  cases[1].p.temperature = 0.0f, cases[1].p.logprobs = 20;
  cases[2].p.temperature = 0.8f, cases[2].p.top_k = 1, cases[2].p.logprobs = 0, cases[2].p.seed = 5;
  cases[3].p.temperature = 1.3f, cases[3].p.top_k = 1, cases[3].p.top_p = 0.5f,
  cases[3].p.logprobs = 7, cases[3].p.seed = 6;
  EXPECT_EQ(compare_with_host(logits, V, cases, rows, "greedy/top_k=1"), 0);
}

TEST(GpuSampling, PenaltiesBiasAndMinTokensMatchHost) {
  REQUIRE_GPU();
  const int rows = 12, V = kLlamaVocab;
  const std::vector<float> logits = random_rows(rows, V, 2.0, 2);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> id(0, V - 1);
  std::vector<std::int32_t> prompt(2000), output(300);
  for (auto& t : prompt) t = id(rng);
  for (auto& t : output) t = id(rng) % 500;  // repeats: counts > 1
  std::vector<Case> cases(6);
  for (auto& c : cases) c.prompt = prompt, c.output = output, c.eos = {128001, 128009};
  cases[0].p.temperature = 0.0f, cases[0].p.repetition_penalty = 1.7f, cases[0].p.logprobs = 5;
  cases[1].p.temperature = 0.0f, cases[1].p.frequency_penalty = 0.9f,
  cases[1].p.presence_penalty = 1.1f, cases[1].p.logprobs = 3;
  // Bias several ids (one twice: fp32 adds in request order) and make one the argmax.
  cases[2].p.temperature = 0.0f,
  cases[2].p.logit_bias = {{1234, 30.0f}, {7, -100.0f}, {1234, 0.3f}, {99, 5.5f}};
  cases[2].p.logprobs = 4;
  // min_tokens not reached: the EOS ids and a stop id are banned even when biased up.
  cases[3].p.temperature = 0.0f, cases[3].p.min_tokens = 400, cases[3].p.stop_token_ids = {55};
  cases[3].p.logit_bias = {{128009, 100.0f}, {55, 90.0f}};
  cases[3].p.logprobs = 2;
  // min_tokens reached: the biased EOS wins.
  cases[4] = cases[3], cases[4].p.min_tokens = 300;
  // Everything at once, sampled with a seed.
  cases[5].p.temperature = 0.9f, cases[5].p.top_k = 200, cases[5].p.top_p = 0.95f,
  cases[5].p.min_p = 0.01f, cases[5].p.repetition_penalty = 0.8f,
  cases[5].p.frequency_penalty = -0.3f, cases[5].p.presence_penalty = 0.2f,
  cases[5].p.logit_bias = {{3, 2.0f}}, cases[5].p.seed = 77, cases[5].p.logprobs = 20;
  EXPECT_EQ(compare_with_host(logits, V, cases, rows, "penalties"), 0);
  // The effect itself (not only agreement): case 3 bans, case 4 lets the biased EOS win.
  DeviceSampler s;
  const DeviceRun d = run_device(logits, V, cases, 6, s);
  EXPECT_NE(d.res[3].token, 128009);
  EXPECT_NE(d.res[3].token, 55);
  EXPECT_EQ(d.res[4].token, 128009);
  EXPECT_EQ(d.res[2].token, 1234);
}

// Every stochastic rule on a Llama-3-sized row: the seeded draw equals the host's draw.
TEST(GpuSampling, SeededDrawsEqualHostOnLargeVocab) {
  REQUIRE_GPU();
  const int rows = 96, V = kLlamaVocab;
  const std::vector<float> logits = random_rows(rows, V, 2.5, 4);
  std::vector<Case> cases(8);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    cases[i].p.seed = 1000 + i;
    cases[i].output.assign(i, 1);  // output index i: a different draw per case
  }
  cases[0].p.temperature = 1.0f;
  cases[1].p.temperature = 0.7f, cases[1].p.top_k = 50;
  cases[2].p.temperature = 1.0f, cases[2].p.top_p = 0.9f;
  cases[3].p.temperature = 1.5f, cases[3].p.min_p = 0.05f;
  cases[4].p.temperature = 0.8f, cases[4].p.top_k = 1000, cases[4].p.top_p = 0.7f,
  cases[4].p.min_p = 0.02f, cases[4].p.logprobs = 5;
  cases[5].p.temperature = 3.0f, cases[5].p.top_p = 0.99f;  // ~flat: a huge nucleus
  cases[6].p.temperature = 0.2f, cases[6].p.top_p = 0.3f;
  cases[7].p.temperature = 1.0f, cases[7].p.top_k = 5, cases[7].p.logprobs = 2;
  double ms = 0;
  const int diff = compare_with_host(logits, V, cases, rows, "seeded", &ms);
  figure("sampling_seeded_rows_token_mismatch", diff);
  figure("sampling_96_rows_128k_ms", ms);
  EXPECT_LE(diff, 1) << "draws must equal the host's except at ~1e-9 fixed-point boundaries";
}

// Exact truncated distribution of `w` (unnormalised, host rules): top_k, top_p over the
// renormalised top-k, min_p relative to the max.
std::vector<double> truncated(const std::vector<float>& logits, const SamplingParams& p) {
  const int V = static_cast<int>(logits.size());
  double mx = -INFINITY;
  for (float v : logits) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> w(static_cast<std::size_t>(V));
  for (int i = 0; i < V; ++i)
    w[static_cast<std::size_t>(i)] =
        std::exp((static_cast<double>(logits[static_cast<std::size_t>(i)]) - mx) / p.temperature);
  std::vector<int> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return w[static_cast<std::size_t>(a)] > w[static_cast<std::size_t>(b)];
  });
  std::size_t keep = order.size();
  if (p.top_k > 0) keep = std::min<std::size_t>(keep, static_cast<std::size_t>(p.top_k));
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) total += w[static_cast<std::size_t>(order[i])];
  double mass = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    mass += w[static_cast<std::size_t>(order[i])];
    if (mass >= p.top_p * total) {
      keep = i + 1;
      break;
    }
  }
  std::vector<double> prob(static_cast<std::size_t>(V), 0.0);
  double z = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    const double x = w[static_cast<std::size_t>(order[i])];
    if (x >= p.min_p) prob[static_cast<std::size_t>(order[i])] = x, z += x;
  }
  for (auto& x : prob) x /= z;
  return prob;
}

TEST(GpuSampling, DistributionsMatchTruncatedSoftmax) {
  REQUIRE_GPU();
  const int V = 1000, draws = 20000;
  const std::vector<float> base = random_rows(1, V, 2.0, 5);
  std::vector<float> logits(static_cast<std::size_t>(draws) * V);
  for (int r = 0; r < draws; ++r)
    std::copy(base.begin(), base.end(), logits.begin() + static_cast<std::ptrdiff_t>(r) * V);
  std::vector<SamplingParams> configs(5);
  configs[0].temperature = 1.0f, configs[0].top_k = 20;
  configs[1].temperature = 1.0f, configs[1].top_p = 0.6f;
  configs[2].temperature = 0.8f, configs[2].min_p = 0.1f;
  configs[3].temperature = 1.4f, configs[3].top_k = 100, configs[3].top_p = 0.8f,
  configs[3].min_p = 0.03f;
  configs[4].temperature = 1.0f;  // untruncated
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    std::vector<Case> cases(static_cast<std::size_t>(draws));
    for (int r = 0; r < draws; ++r) {
      cases[static_cast<std::size_t>(r)].p = configs[ci];
      cases[static_cast<std::size_t>(r)].p.seed = 0x5eed0000ull + static_cast<std::uint64_t>(r);
    }
    DeviceSampler s;
    const DeviceRun d = run_device(logits, V, cases, draws, s);
    const std::vector<double> prob = truncated(base, configs[ci]);
    std::vector<int> count(static_cast<std::size_t>(V), 0);
    for (const auto& res : d.res) {
      ASSERT_EQ(res.status, kSampleOk);
      ASSERT_GE(res.token, 0);
      ASSERT_LT(res.token, V);
      ++count[static_cast<std::size_t>(res.token)];
    }
    // Chi-square over the tokens expected >= 5 times, the rest pooled into one bin.
    double tv = 0, chi2 = 0, rest_e = 0, rest_c = 0;
    int bins = 0, outside = 0;
    for (int i = 0; i < V; ++i) {
      const double pi = prob[static_cast<std::size_t>(i)];
      const int c = count[static_cast<std::size_t>(i)];
      if (pi == 0.0) {
        outside += c;
        continue;
      }
      tv += std::abs(c / static_cast<double>(draws) - pi);
      const double e = pi * draws;
      if (e < 5.0) {
        rest_e += e, rest_c += c;
        continue;
      }
      ++bins;
      chi2 += (c - e) * (c - e) / e;
      if (e >= 10.0) {
        EXPECT_LE(std::abs(c - e), 5.0 * std::sqrt(e * (1 - pi)) + 1.0)
            << "config " << ci << " token " << i;
      }
    }
    if (rest_e > 0) ++bins, chi2 += (rest_c - rest_e) * (rest_c - rest_e) / rest_e;
    tv /= 2;
    const double dof = std::max(1, bins - 1);
    figure("sampling_dist_tv_config" + std::to_string(ci), tv);
    figure("sampling_dist_chi2_per_dof_config" + std::to_string(ci), chi2 / dof);
    EXPECT_EQ(outside, 0) << "config " << ci << ": draws outside the truncated support";
    EXPECT_LT(chi2, dof + 6.0 * std::sqrt(2.0 * dof) + 10.0) << "config " << ci;
    EXPECT_LT(tv, 0.1) << "config " << ci;
  }
}

TEST(GpuSampling, SameSeedSameTokenAcrossBatches) {
  REQUIRE_GPU();
  const int V = kLlamaVocab;
  const std::vector<float> one = random_rows(1, V, 1.0, 6);  // flat-ish: many candidates
  std::vector<Case> cases(1);
  cases[0].p.temperature = 1.0f, cases[0].p.top_p = 0.95f, cases[0].p.seed = 4242;
  cases[0].output = {1, 2, 3};
  // Alone, then at row 37 of a 64-row batch whose other rows use other seeds.
  DeviceSampler s;
  const int alone = run_device(one, V, cases, 1, s).res[0].token;
  std::vector<float> many = random_rows(64, V, 1.0, 7);
  std::copy(one.begin(), one.end(), many.begin() + 37 * static_cast<std::ptrdiff_t>(V));
  std::vector<Case> mixed(64, cases[0]);
  for (int r = 0; r < 64; ++r)
    if (r != 37) mixed[static_cast<std::size_t>(r)].p.seed = static_cast<std::uint64_t>(r);
  for (int rep = 0; rep < 3; ++rep) {
    const DeviceRun d = run_device(many, V, mixed, 64, s);
    EXPECT_EQ(d.res[37].token, alone);
  }
  // Another seed or another output index changes the draw (on this flat row, almost surely).
  int differ = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    std::vector<Case> c2 = cases;
    c2[0].p.seed = seed;
    differ += run_device(one, V, c2, 1, s).res[0].token != alone;
  }
  EXPECT_GE(differ, 6);
}

TEST(GpuSampling, TiesAtTheCutTakeLowestIds) {
  REQUIRE_GPU();
  const int V = 4096, draws = 4000;
  std::vector<float> base(static_cast<std::size_t>(V), -5.0f);
  for (int i : {3000, 17, 2500, 600, 4000}) base[static_cast<std::size_t>(i)] = 2.0f;  // 5-way tie
  base[9] = 1.0f;
  std::vector<float> logits(static_cast<std::size_t>(draws) * V);
  for (int r = 0; r < draws; ++r)
    std::copy(base.begin(), base.end(), logits.begin() + static_cast<std::ptrdiff_t>(r) * V);
  std::vector<Case> cases(static_cast<std::size_t>(draws));
  for (int r = 0; r < draws; ++r) {
    cases[static_cast<std::size_t>(r)].p.top_k = 3;
    cases[static_cast<std::size_t>(r)].p.seed = static_cast<std::uint64_t>(r);
  }
  cases[0].p.logprobs = 4;  // top-N with ties: 17, 600, 2500, 3000
  DeviceSampler s;
  const DeviceRun d = run_device(logits, V, cases, draws, s);
  std::map<int, int> seen;
  for (const auto& r : d.res) ++seen[r.token];
  EXPECT_EQ(seen.size(), 3u);
  for (int t : {17, 600, 2500}) EXPECT_GT(seen[t], draws / 3 - 200) << t;
  ASSERT_EQ(d.res[0].num_top, 4);
  const int want[] = {17, 600, 2500, 3000};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(d.res[0].top_id[i], want[i]);
  // top_p that needs exactly two of the tied tokens: (2 w) / total >= p.
  std::vector<Case> tp(1);
  // Mass: 5 tied tokens of weight 1, token 9 at e^-1, 4090 at e^-7: total ~ 9.1, so
  // top_p 0.18 (need ~ 1.64) takes exactly two of the ties (the lowest ids, 17 and 600).
  tp[0].p.top_p = 0.18f;
  std::vector<float> row(base);
  const std::vector<double> prob = truncated(row, tp[0].p);
  int support = 0;
  for (double x : prob) support += x > 0;
  EXPECT_EQ(support, 2);
  std::map<int, int> seen2;
  for (int r = 0; r < 400; ++r) {
    tp[0].p.seed = static_cast<std::uint64_t>(r);
    ++seen2[run_device(row, V, tp, 1, s).res[0].token];
  }
  EXPECT_EQ(seen2.size(), 2u);
  EXPECT_GT(seen2[17], 100);
  EXPECT_GT(seen2[600], 100);
}

TEST(GpuSampling, ErrorsAsSampleRow) {
  REQUIRE_GPU();
  const int V = 2048;
  std::vector<float> logits = random_rows(3, V, 1.0, 8);
  logits[100] = NAN;
  logits[50] = INFINITY;  // the first bad id is reported
  std::fill(logits.begin() + V, logits.begin() + 2 * V, -INFINITY);
  std::vector<Case> cases(3);
  cases[2].p.logit_bias = {{0, -INFINITY}};
  DeviceSampler s;
  const DeviceRun d = run_device(logits, V, cases, 3, s);
  try {
    finish_sample(d.res[0], d.batch.rows[0]);
    ADD_FAILURE() << "NaN row accepted";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("token 50"), std::string::npos) << e.what();
  }
  EXPECT_THROW(finish_sample(d.res[1], d.batch.rows[1]), InvalidRequest);
  const SampleOutput ok = finish_sample(d.res[2], d.batch.rows[2]);
  EXPECT_NE(ok.token, 0);  // banned by a -inf bias
}

}  // namespace
}  // namespace strata::cuda
