// Host half of device sampling (docs/sampling.md "CUDA"; the kernel half is cuda/sampling.h):
// prepare_samples() validates each request exactly as runtime/sampler.cpp's sample_row does and
// flattens it into the POD images of the device buffers (per-row descriptors, logit_bias/ban
// edits, token history for the penalties); finish_sample() turns a device result back into a
// SampleOutput or the error sample_row would have thrown; device_sampling_supported() says
// which rows the device sampler covers. Plain C++ with no CUDA header (runs without a GPU,
// unit-tested in CI: tests/cuda/sampling_prep_test.cpp; used by cuda/step_layout.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/sampling_params.h"

namespace strata::cuda {

inline constexpr int kMaxDeviceLogprobs = 20;
// Weights are summed in 2^-44 fixed point (exact, order-independent integer sums): the mass
// of a row must stay below 2^63, i.e. vocab <= 2^19 (each weight <= 1).
inline constexpr int kMaxDeviceVocab = 1 << 19;
inline constexpr int kSampleThreads = 1024;

// Row r of a sampling batch (what the kernel reads).
struct SampleRowDesc {
  int logit_row = 0;         // row of the logits buffer
  int top_k = 0;             // 0: disabled (-1 and >= vocab are normalised to 0)
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;        // 1: disabled
  float min_p = 0.0f;        // 0: disabled
  float repetition = 1.0f;   // 1: disabled
  float frequency = 0.0f;
  float presence = 0.0f;
  int logprobs = -1;  // -1: none; 0..kMaxDeviceLogprobs
  int edit_off = 0;   // SampleEdit range in SampleBatch::edits
  int edit_n = 0;
  int hist_off = 0;     // prompt ids then output ids in SampleBatch::history
  int prompt_n = 0;     // 0 unless repetition != 1
  int output_n = 0;     // 0 unless a penalty is active
  int count_slot = -1;  // dense [vocab] count scratch row; -1: no penalties
  int pad = 0;
  unsigned long long u53 = 0;  // the draw: sample_uniform(seed, output index) * 2^53
};

// Step 1 of one token id (ids distinct within a row, sorted): the logit_bias values of this
// id in request order (added one after another in fp32, like the host), then the min_tokens
// ban (-inf).
struct SampleEdit {
  int id = 0;
  int bias_off = 0;  // into SampleBatch::biases
  int bias_n = 0;
  int ban = 0;
};

// What the kernel writes per row.
struct SampleResultDev {
  int token = -1;
  float logprob = 0.0f;  // of token, after steps 1-2, before temperature (always)
  int argmax = -1;       // of the same row, lowest id on ties
  int status = 0;        // kSampleOk / kSampleBadLogit / kSampleAllBanned
  int bad_index = -1;    // kSampleBadLogit: the first NaN/+inf logit
  float bad_value = 0.0f;
  int num_top = 0;
  int top_id[kMaxDeviceLogprobs] = {};
  float top_logprob[kMaxDeviceLogprobs] = {};
};
inline constexpr int kSampleOk = 0;
inline constexpr int kSampleBadLogit = 1;
inline constexpr int kSampleAllBanned = 2;

// One row to sample: the same inputs as sample_row.
struct SampleRequest {
  int logit_row = 0;
  const SamplingParams* params = nullptr;
  const std::vector<std::int32_t>* prompt = nullptr;   // nullptr: empty
  const std::vector<std::int32_t>* output = nullptr;   // nullptr: empty
  const std::vector<std::int32_t>* eos_ids = nullptr;  // nullptr: none (ignore_eos)
};

// Host images of the device buffers of one launch.
struct SampleBatch {
  std::vector<SampleRowDesc> rows;
  std::vector<SampleEdit> edits;
  std::vector<float> biases;
  std::vector<std::int32_t> history;
  int count_rows = 0;  // dense count scratch rows needed ([count_rows][vocab] int32)
};

// True when the device sampler implements every parameter of `p` for this vocabulary.
bool device_sampling_supported(const SamplingParams& p, int vocab);

// The draw of sample_uniform(seed, index) as an integer in [0, 2^53).
std::uint64_t sample_uniform_bits(std::uint64_t seed, std::uint64_t output_index);

// Validates every request as sample_row does (InvalidRequest naming the parameter;
// InternalError for a history id outside the vocabulary) and builds the batch.
SampleBatch prepare_samples(const std::vector<SampleRequest>& reqs, int vocab);

// The kernel's result of row `r` as sample_row's output, or the error sample_row throws
// (InternalError for a non-finite logit, InvalidRequest("logit_bias") when all are banned).
SampleOutput finish_sample(const SampleResultDev& res, const SampleRowDesc& row);

}  // namespace strata::cuda
