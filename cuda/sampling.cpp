// Host half of the device sampler (cuda/sampling.h): request validation and flattening into
// the device buffer images, result conversion, and the buffers themselves.
#include "cuda/sampling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cuda/async_feed.h"
#include "cuda/cuda_check.h"
#include "runtime/error.h"

namespace strata::cuda {

bool device_sampling_supported(const SamplingParams& p, int vocab) {
  return vocab > 0 && vocab <= kMaxDeviceVocab && p.logprobs <= kMaxDeviceLogprobs;
}

std::uint64_t sample_uniform_bits(std::uint64_t seed, std::uint64_t output_index) {
  return splitmix64(splitmix64(seed) ^ output_index) >> 11;
}

SampleBatch prepare_samples(const std::vector<SampleRequest>& reqs, int vocab) {
  SampleBatch b;
  b.rows.reserve(reqs.size());
  const std::vector<std::int32_t> none;
  const auto in_vocab = [&](std::int32_t id) { return id >= 0 && id < vocab; };
  for (const SampleRequest& q : reqs) {
    if (!q.params) throw InternalError("device sampler: request without SamplingParams");
    const SamplingParams& p = *q.params;
    validate_sampling_params(p, vocab);
    if (!device_sampling_supported(p, vocab))
      throw InternalError("device sampler: parameters not supported on the device (logprobs " +
                          std::to_string(p.logprobs) + ", vocab " + std::to_string(vocab) + ")");
    const auto& prompt = q.prompt ? *q.prompt : none;
    const auto& output = q.output ? *q.output : none;
    const auto& eos = q.eos_ids ? *q.eos_ids : none;
    for (auto id : prompt)
      if (!in_vocab(id))
        throw InternalError("sample_row: prompt token " + std::to_string(id) + " outside vocab " +
                            std::to_string(vocab));
    for (auto id : output)
      if (!in_vocab(id))
        throw InternalError("sample_row: output token " + std::to_string(id) + " outside vocab " +
                            std::to_string(vocab));

    SampleRowDesc r;
    r.logit_row = q.logit_row;
    r.top_k = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : 0;
    r.temperature = p.temperature;
    r.top_p = p.top_p;
    r.min_p = p.min_p;
    r.repetition = p.repetition_penalty;
    r.frequency = p.frequency_penalty;
    r.presence = p.presence_penalty;
    r.logprobs = p.logprobs < 0 ? -1 : std::min(p.logprobs, vocab);
    r.u53 = sample_uniform_bits(p.seed, output.size());

    // Step 1 edits: logit_bias entries grouped by id (request order kept within an id), then
    // the min_tokens bans, merged into one edit per distinct id.
    struct Item {
      std::int32_t id;
      int order;  // bias index, or a large value for a ban
      float bias;
    };
    std::vector<Item> items;
    for (std::size_t i = 0; i < p.logit_bias.size(); ++i)
      items.push_back({p.logit_bias[i].first, static_cast<int>(i), p.logit_bias[i].second});
    constexpr int kBan = 1 << 30;
    if (output.size() < static_cast<std::size_t>(p.min_tokens)) {
      for (auto id : eos)
        if (in_vocab(id)) items.push_back({id, kBan, 0.0f});
      for (auto id : p.stop_token_ids) items.push_back({id, kBan, 0.0f});
    }
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& c) {
      return a.id < c.id || (a.id == c.id && a.order < c.order);
    });
    r.edit_off = static_cast<int>(b.edits.size());
    for (std::size_t i = 0; i < items.size();) {
      SampleEdit e;
      e.id = items[i].id;
      e.bias_off = static_cast<int>(b.biases.size());
      std::size_t j = i;
      for (; j < items.size() && items[j].id == e.id; ++j) {
        if (items[j].order == kBan)
          e.ban = 1;
        else
          b.biases.push_back(items[j].bias), ++e.bias_n;
      }
      b.edits.push_back(e);
      i = j;
    }
    r.edit_n = static_cast<int>(b.edits.size()) - r.edit_off;

    // Step 2: the token history, counted on the device into a dense scratch row.
    const bool rep = p.repetition_penalty != 1.0f;
    const bool freq = p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
    if ((rep && !(prompt.empty() && output.empty())) || (freq && !output.empty())) {
      r.count_slot = b.count_rows++;
      r.hist_off = static_cast<int>(b.history.size());
      if (rep) {
        b.history.insert(b.history.end(), prompt.begin(), prompt.end());
        r.prompt_n = static_cast<int>(prompt.size());
      }
      b.history.insert(b.history.end(), output.begin(), output.end());
      r.output_n = static_cast<int>(output.size());
    }
    b.rows.push_back(r);
  }
  return b;
}

SampleOutput finish_sample(const SampleResultDev& res, const SampleRowDesc& row) {
  if (res.status == kSampleBadLogit)
    throw InternalError("sample_row: non-finite logit " + std::to_string(res.bad_value) +
                        " at token " + std::to_string(res.bad_index));
  if (res.status == kSampleAllBanned)
    throw InvalidRequest("logit_bias", "every token of the vocabulary is banned or has -inf logit");
  if (res.status != kSampleOk || res.token < 0)
    throw InternalError("device sampler: bad result (status " + std::to_string(res.status) +
                        ", token " + std::to_string(res.token) + ")");
  SampleOutput o;
  o.token = res.token;
  o.logprob = res.logprob;  // always, as sample_row (the quality guardrail records it)
  o.argmax = res.argmax;
  if (row.logprobs > 0) {
    if (res.num_top != row.logprobs)
      throw InternalError("device sampler: " + std::to_string(res.num_top) +
                          " top logprobs, expected " + std::to_string(row.logprobs));
    for (int i = 0; i < res.num_top; ++i) o.top.push_back({res.top_id[i], res.top_logprob[i]});
  }
  return o;
}

namespace {
std::size_t align256(std::size_t n) {
  return (n + 255) / 256 * 256;
}
}  // namespace

DeviceSampler::~DeviceSampler() {
  if (d_buf_) cudaFree(d_buf_);
  if (h_buf_) cudaFreeHost(h_buf_);
  if (d_counts_) cudaFree(d_counts_);
}

void DeviceSampler::run(float* logits, int vocab, const SampleBatch& batch, cudaStream_t s,
                        const SampleHistoryFeed& feed) {
  const std::size_t n = batch.rows.size();
  if (n == 0) return;
  const std::size_t rows_off = 0;
  const std::size_t edits_off = align256(rows_off + n * sizeof(SampleRowDesc));
  const std::size_t bias_off = align256(edits_off + batch.edits.size() * sizeof(SampleEdit));
  const std::size_t hist_off = align256(bias_off + batch.biases.size() * sizeof(float));
  const std::size_t upload = hist_off + batch.history.size() * sizeof(std::int32_t);
  const std::size_t out_off = align256(upload);
  const std::size_t total = out_off + n * sizeof(SampleResultDev);
  // Grow-only. The caller synchronises the stream after every run, so nothing in flight
  // reads the old buffers when they are replaced.
  if (total > d_bytes_) {
    if (d_buf_) cudaFree(d_buf_);
    if (h_buf_) cudaFreeHost(h_buf_);
    d_buf_ = h_buf_ = nullptr;
    d_bytes_ = h_bytes_ = 0;
    const std::size_t want = total + total / 2;
    CUDA_CHECK(cudaMalloc(&d_buf_, want));
    d_bytes_ = want;
    CUDA_CHECK(cudaMallocHost(&h_buf_, want));
    h_bytes_ = want;
  }
  const std::size_t counts = static_cast<std::size_t>(batch.count_rows) * vocab;
  if (counts > counts_elems_) {
    if (d_counts_) cudaFree(d_counts_);
    d_counts_ = nullptr;
    counts_elems_ = 0;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_counts_), counts * sizeof(int)));
    counts_elems_ = counts;
  }
  auto* h = static_cast<unsigned char*>(h_buf_);
  auto* d = static_cast<unsigned char*>(d_buf_);
  auto put = [&](std::size_t off, const void* src, std::size_t bytes) {
    if (bytes) std::memcpy(h + off, src, bytes);
  };
  put(rows_off, batch.rows.data(), n * sizeof(SampleRowDesc));
  put(edits_off, batch.edits.data(), batch.edits.size() * sizeof(SampleEdit));
  put(bias_off, batch.biases.data(), batch.biases.size() * sizeof(float));
  put(hist_off, batch.history.data(), batch.history.size() * sizeof(std::int32_t));
  CUDA_CHECK(cudaMemcpyAsync(d, h, upload, cudaMemcpyHostToDevice, s));
  if (feed.n > 0)
    CUDA_CHECK(launch_feed_gather(reinterpret_cast<std::int32_t*>(d + hist_off), feed.pairs, feed.n,
                                  feed.fed, s));
  SampleKernelParams kp;
  kp.logits = logits;
  kp.vocab = vocab;
  kp.num_rows = static_cast<int>(n);
  kp.rows = reinterpret_cast<const SampleRowDesc*>(d + rows_off);
  kp.edits = reinterpret_cast<const SampleEdit*>(d + edits_off);
  kp.biases = reinterpret_cast<const float*>(d + bias_off);
  kp.history = reinterpret_cast<const std::int32_t*>(d + hist_off);
  kp.counts = d_counts_;
  kp.out = reinterpret_cast<SampleResultDev*>(d + out_off);
  launch_sample(kp, s);
  d_out_ = kp.out;
  h_out_ = reinterpret_cast<SampleResultDev*>(h + out_off);
  CUDA_CHECK(
      cudaMemcpyAsync(h_out_, kp.out, n * sizeof(SampleResultDev), cudaMemcpyDeviceToHost, s));
}

}  // namespace strata::cuda
