// Host half of the device sampler (cuda/sampling.h): what goes into the device buffers and
// how results come back. Runs without a GPU.
#include <gtest/gtest.h>

#include <cmath>

#include "cuda/sampling.h"
#include "runtime/error.h"

namespace strata::cuda {
namespace {

constexpr int kVocab = 1000;

SampleRequest req(const SamplingParams& p, int row = 0,
                  const std::vector<std::int32_t>* prompt = nullptr,
                  const std::vector<std::int32_t>* output = nullptr,
                  const std::vector<std::int32_t>* eos = nullptr) {
  SampleRequest r;
  r.logit_row = row;
  r.params = &p;
  r.prompt = prompt;
  r.output = output;
  r.eos_ids = eos;
  return r;
}

TEST(SamplingPrep, NormalisesParametersAndDraw) {
  SamplingParams a;
  a.temperature = 0.7f, a.top_k = -1, a.top_p = 0.9f, a.min_p = 0.05f, a.seed = 1234;
  SamplingParams b;
  b.top_k = kVocab, b.logprobs = 5, b.seed = 99;
  SamplingParams c;
  c.top_k = 40;
  c.logprobs = 0;
  const std::vector<std::int32_t> out{1, 2, 3};
  const SampleBatch batch =
      prepare_samples({req(a, 7), req(b, 3, nullptr, &out), req(c, 0)}, kVocab);
  ASSERT_EQ(batch.rows.size(), 3u);
  EXPECT_EQ(batch.rows[0].logit_row, 7);
  EXPECT_EQ(batch.rows[0].top_k, 0);  // -1: disabled
  EXPECT_EQ(batch.rows[1].top_k, 0);  // >= vocab: disabled
  EXPECT_EQ(batch.rows[2].top_k, 40);
  EXPECT_FLOAT_EQ(batch.rows[0].temperature, 0.7f);
  EXPECT_FLOAT_EQ(batch.rows[0].top_p, 0.9f);
  EXPECT_FLOAT_EQ(batch.rows[0].min_p, 0.05f);
  EXPECT_EQ(batch.rows[0].logprobs, -1);
  EXPECT_EQ(batch.rows[1].logprobs, 5);
  EXPECT_EQ(batch.rows[2].logprobs, 0);
  // The draw is sample_uniform(seed, output index) exactly, as an integer.
  EXPECT_EQ(static_cast<double>(batch.rows[0].u53) * 0x1.0p-53, sample_uniform(1234, 0));
  EXPECT_EQ(static_cast<double>(batch.rows[1].u53) * 0x1.0p-53, sample_uniform(99, 3));
  EXPECT_NE(batch.rows[0].u53, sample_uniform_bits(1234, 1));
  EXPECT_LT(batch.rows[0].u53, 1ull << 53);
  // No penalties, no edits: nothing else to upload.
  EXPECT_EQ(batch.count_rows, 0);
  EXPECT_TRUE(batch.edits.empty());
  EXPECT_TRUE(batch.history.empty());
  for (const auto& r : batch.rows) EXPECT_EQ(r.count_slot, -1);
}

TEST(SamplingPrep, BiasEditsKeepRequestOrderAndMergeBans) {
  SamplingParams p;
  p.logit_bias = {{500, 1.5f}, {20, -2.0f}, {500, 0.25f}, {7, 3.0f}};
  p.min_tokens = 4;
  p.stop_token_ids = {20, 900};
  const std::vector<std::int32_t> eos{7, 128000 /* outside the vocabulary: skipped */, 999};
  const std::vector<std::int32_t> out{1, 2};
  const SampleBatch b = prepare_samples({req(p, 0, nullptr, &out, &eos)}, kVocab);
  ASSERT_EQ(b.rows[0].edit_off, 0);
  ASSERT_EQ(b.rows[0].edit_n, 5);  // ids 7, 20, 500, 900, 999
  const std::vector<int> ids{7, 20, 500, 900, 999};
  const std::vector<int> bans{1, 1, 0, 1, 1};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(b.edits[static_cast<std::size_t>(i)].id, ids[static_cast<std::size_t>(i)]);
    EXPECT_EQ(b.edits[static_cast<std::size_t>(i)].ban, bans[static_cast<std::size_t>(i)]);
  }
  const SampleEdit& e500 = b.edits[2];
  ASSERT_EQ(e500.bias_n, 2);
  EXPECT_EQ(b.biases[static_cast<std::size_t>(e500.bias_off)], 1.5f);  // request order
  EXPECT_EQ(b.biases[static_cast<std::size_t>(e500.bias_off) + 1], 0.25f);
  EXPECT_EQ(b.edits[0].bias_n, 1);
  EXPECT_EQ(b.biases[static_cast<std::size_t>(b.edits[0].bias_off)], 3.0f);
  EXPECT_EQ(b.edits[3].bias_n, 0);

  // min_tokens reached: only the biases remain; ignore_eos (no eos list): only stop ids.
  const std::vector<std::int32_t> long_out{1, 2, 3, 4};
  const SampleBatch reached = prepare_samples({req(p, 0, nullptr, &long_out, &eos)}, kVocab);
  ASSERT_EQ(reached.rows[0].edit_n, 3);  // 7, 20, 500 (bias only)
  for (const auto& e : reached.edits) EXPECT_EQ(e.ban, 0);
  SamplingParams q;
  q.min_tokens = 1;
  q.stop_token_ids = {5};
  const SampleBatch no_eos = prepare_samples({req(q), req(q, 1, nullptr, nullptr, &eos)}, kVocab);
  ASSERT_EQ(no_eos.rows[0].edit_n, 1);
  EXPECT_EQ(no_eos.edits[0].id, 5);
  EXPECT_EQ(no_eos.rows[1].edit_off, 1);
  EXPECT_EQ(no_eos.rows[1].edit_n, 3);  // stop 5, eos 7 and 999
}

TEST(SamplingPrep, HistoryOnlyForActivePenalties) {
  const std::vector<std::int32_t> prompt{3, 4, 4, 5}, out{4, 9};
  SamplingParams none;
  SamplingParams rep;
  rep.repetition_penalty = 1.3f;
  SamplingParams freq;
  freq.frequency_penalty = 0.5f;
  SamplingParams pres;
  pres.presence_penalty = -0.5f;
  const std::vector<std::int32_t> empty;
  const SampleBatch b = prepare_samples(
      {req(none, 0, &prompt, &out), req(rep, 1, &prompt, &out), req(freq, 2, &prompt, &out),
       req(pres, 3, &prompt, &empty), req(pres, 4, &prompt, &out)},
      kVocab);
  EXPECT_EQ(b.rows[0].count_slot, -1);
  // Repetition: prompt then output.
  EXPECT_EQ(b.rows[1].count_slot, 0);
  EXPECT_EQ(b.rows[1].prompt_n, 4);
  EXPECT_EQ(b.rows[1].output_n, 2);
  EXPECT_EQ(std::vector<std::int32_t>(b.history.begin() + b.rows[1].hist_off,
                                      b.history.begin() + b.rows[1].hist_off + 6),
            (std::vector<std::int32_t>{3, 4, 4, 5, 4, 9}));
  // Frequency only: the output alone.
  EXPECT_EQ(b.rows[2].count_slot, 1);
  EXPECT_EQ(b.rows[2].prompt_n, 0);
  EXPECT_EQ(b.rows[2].output_n, 2);
  EXPECT_EQ(b.history[static_cast<std::size_t>(b.rows[2].hist_off)], 4);
  // Presence with no output yet: nothing to count.
  EXPECT_EQ(b.rows[3].count_slot, -1);
  EXPECT_EQ(b.rows[4].count_slot, 2);
  EXPECT_EQ(b.count_rows, 3);
  EXPECT_EQ(b.history.size(), 6u + 2u + 2u);
}

TEST(SamplingPrep, RejectsWhatSampleRowRejects) {
  auto bad = [](auto mutate, const char* param) {
    SamplingParams p;
    mutate(p);
    try {
      prepare_samples({req(p)}, kVocab);
      ADD_FAILURE() << "accepted bad " << param;
    } catch (const InvalidRequest& e) {
      EXPECT_EQ(e.param(), param) << e.what();
    }
  };
  bad([](SamplingParams& p) { p.temperature = -1.0f; }, "temperature");
  bad([](SamplingParams& p) { p.top_p = 0.0f; }, "top_p");
  bad([](SamplingParams& p) { p.top_k = -2; }, "top_k");
  bad([](SamplingParams& p) { p.min_p = 1.5f; }, "min_p");
  bad([](SamplingParams& p) { p.repetition_penalty = 0.0f; }, "repetition_penalty");
  bad([](SamplingParams& p) { p.logit_bias = {{kVocab, 1.0f}}; }, "logit_bias");
  bad([](SamplingParams& p) { p.stop_token_ids = {-1}; }, "stop_token_ids");
  SamplingParams ok;
  const std::vector<std::int32_t> bad_hist{1, kVocab};
  EXPECT_THROW(prepare_samples({req(ok, 0, &bad_hist)}, kVocab), InternalError);
  EXPECT_THROW(prepare_samples({req(ok, 0, nullptr, &bad_hist)}, kVocab), InternalError);
  SampleRequest no_params;
  EXPECT_THROW(prepare_samples({no_params}, kVocab), InternalError);
}

TEST(SamplingPrep, DeviceSupportLimits) {
  SamplingParams p;
  p.logprobs = kMaxDeviceLogprobs;
  EXPECT_TRUE(device_sampling_supported(p, 128256));
  p.logprobs = kMaxDeviceLogprobs + 1;
  EXPECT_FALSE(device_sampling_supported(p, 128256));
  EXPECT_THROW(prepare_samples({req(p)}, kVocab), InternalError);
  p.logprobs = 1;
  EXPECT_FALSE(device_sampling_supported(p, kMaxDeviceVocab + 1));
  EXPECT_TRUE(device_sampling_supported(p, kMaxDeviceVocab));
  // logprobs above a tiny vocabulary are clamped like sample_row's top_n.
  p.logprobs = 20;
  const SampleBatch b = prepare_samples({req(p)}, 8);
  EXPECT_EQ(b.rows[0].logprobs, 8);
}

TEST(SamplingPrep, FinishMapsResultsAndErrors) {
  SampleRowDesc row;
  row.logprobs = 2;
  SampleResultDev r;
  r.token = 42;
  r.logprob = -0.5f;
  r.num_top = 2;
  r.top_id[0] = 42, r.top_logprob[0] = -0.5f;
  r.top_id[1] = 7, r.top_logprob[1] = -1.25f;
  SampleOutput o = finish_sample(r, row);
  EXPECT_EQ(o.token, 42);
  EXPECT_EQ(o.logprob, -0.5f);
  ASSERT_EQ(o.top.size(), 2u);
  EXPECT_EQ(o.top[1].token, 7);
  EXPECT_EQ(o.top[1].logprob, -1.25f);
  r.argmax = 9;
  row.logprobs = -1;          // no logprobs requested: no top-N, but the token's logprob and the
  o = finish_sample(r, row);  // argmax always (the quality guardrail records them)
  EXPECT_EQ(o.logprob, -0.5f);
  EXPECT_EQ(o.argmax, 9);
  EXPECT_TRUE(o.top.empty());
  row.logprobs = 3;  // the kernel returned fewer than asked
  EXPECT_THROW(finish_sample(r, row), InternalError);
  SampleResultDev bad;
  bad.status = kSampleBadLogit;
  bad.bad_index = 17;
  bad.bad_value = NAN;
  try {
    finish_sample(bad, row);
    ADD_FAILURE();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("token 17"), std::string::npos) << e.what();
  }
  SampleResultDev banned;
  banned.status = kSampleAllBanned;
  EXPECT_THROW(finish_sample(banned, row), InvalidRequest);
  SampleResultDev none;  // token -1 with status ok: a kernel bug, not a silent -1
  EXPECT_THROW(finish_sample(none, row), InternalError);
}

}  // namespace
}  // namespace strata::cuda
