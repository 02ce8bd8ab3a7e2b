// The CUDA backend's native pipelined steps (scheduler.async_steps; cuda/backend/pipeline.cpp,
// docs/cuda-backend.md "Pipelined steps"): the same workloads through the engine with the
// synchronous loop (step()) and with the pipelined loop (submit/collect, pending inputs fed on
// the device) emit the same streams bit for bit — token ids, text, logprobs and their top lists
// (bit patterns), finish reasons, usage — for greedy, seeded sampling with penalties and
// min_tokens, a sparse profile, graphs on and off; and the pipelined run really launched steps
// without waiting and fed pending rows on the device. Model: the tiny preset (2 layers), written
// by make_model (bit-identical to random:tiny; the engine needs its tokenizer files).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "cuda/cuda_backend.h"
#include "cuda/testing/backend_probe.h"
#include "runtime/config.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata::gputest {
namespace {

using cuda::CudaBackend;
using cuda::CudaBackendProbe;

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::vector<std::string> trace(TokenStream& s) {
  std::vector<std::string> out;
  while (auto ev = s.next_blocking()) {
    std::ostringstream o;
    o << "i" << ev->index << " t[";
    for (auto t : ev->token_ids) o << t << ",";
    o << "] x'" << ev->text << "' l[";
    for (const auto& lp : ev->logprobs) {
      o << lp.token << ":" << bits(lp.logprob) << "{";
      for (const auto& t : lp.top) o << t.token << ":" << bits(t.logprob) << ",";
      o << "}";
    }
    o << "] f" << static_cast<int>(ev->finish) << " e'" << ev->error << "'";
    if (ev->usage) o << " u" << ev->usage->prompt_tokens << "/" << ev->usage->completion_tokens;
    out.push_back(o.str());
  }
  return out;
}

Config base_config(bool graphs) {
  Config c;
  c.model.path = cached_model_dir("async", "tiny", 2, 11);
  c.model.max_model_len = 1024;
  c.cache.kv_bytes = 64ull << 20;
  c.scheduler.max_num_seqs = 16;
  c.scheduler.max_num_batched_tokens = 96;  // long prompts chunked beside decodes
  c.scheduler.request_timeout_s = 0;
  c.backend.cuda_graphs = graphs;
  c.backend.sparse_graphs = graphs;
  return c;
}

struct Run {
  std::vector<std::vector<std::string>> streams;
  CudaBackendProbe::AsyncCounts counts;
};

Run run(Config cfg, bool async, const std::vector<Request>& reqs) {
  cfg.scheduler.async_steps = async;
  CudaBackend* be = nullptr;
  auto e = Engine::create(cfg, [&be](const Config& c) {
    std::vector<std::unique_ptr<Backend>> v;
    auto b = std::make_unique<CudaBackend>(c, 0);
    be = b.get();
    v.push_back(std::move(b));
    return v;
  });
  Run r;
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& q : reqs) ss.push_back(e->submit(q));
  for (auto& s : ss) r.streams.push_back(trace(*s));
  r.counts = CudaBackendProbe(*be).async_counts();
  return r;
}

void expect_identical(const Config& cfg, const std::vector<Request>& reqs) {
  const Run a = run(cfg, false, reqs);
  const Run b = run(cfg, true, reqs);
  ASSERT_EQ(a.streams.size(), b.streams.size());
  for (std::size_t i = 0; i < a.streams.size(); ++i)
    EXPECT_EQ(a.streams[i], b.streams[i]) << "request " << i << " differs";
  EXPECT_EQ(a.counts.device_steps + a.counts.host_steps, 0) << "the synchronous run pipelined";
  EXPECT_GT(b.counts.device_steps, 0) << "no step was pipelined";
  EXPECT_GT(b.counts.fed_rows, 0) << "no pending row was fed on the device";
  EXPECT_GT(b.counts.overlapped, 0) << "no step was launched behind an unfinished one";
  std::printf("async: %d device steps, %d synchronous, %d fed rows, %d overlapped\n",
              b.counts.device_steps, b.counts.host_steps, b.counts.fed_rows, b.counts.overlapped);
}

std::vector<std::int32_t> prompt(std::mt19937& rng, int n) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  for (auto& t : p) t = static_cast<std::int32_t>(rng() % 200);
  return p;
}

Request request(std::mt19937& rng, int len, int max_tokens) {
  Request r;
  r.prompt_ids = prompt(rng, len);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  r.params.logprobs = 2;
  return r;
}

std::vector<Request> greedy_workload() {
  std::mt19937 rng(1);
  std::vector<Request> w;
  for (int i = 0; i < 10; ++i) w.push_back(request(rng, 3 + 17 * i % 120, 4 + 7 * (i % 5)));
  for (auto& r : w) r.params.logprobs = -1;  // the device argmax route
  return w;
}

std::vector<Request> sampled_workload() {
  std::mt19937 rng(4);
  std::vector<Request> w;
  for (int i = 0; i < 10; ++i) {
    Request r = request(rng, 6 + 13 * i, 24);
    r.params.temperature = i % 3 == 2 ? 0.0f : 0.8f;
    r.params.top_p = 0.9f;
    r.params.seed = 77 + i;
    r.params.repetition_penalty = 1.0f + 0.15f * static_cast<float>(1 + i % 3);
    r.params.presence_penalty = 0.4f * static_cast<float>(i % 3);
    r.params.frequency_penalty = 0.6f * static_cast<float>((i + 1) % 3);
    if (i % 4 == 1) {  // min_tokens with EOS live: the ban ends counting the pending token
      r.params.ignore_eos = false;
      r.params.min_tokens = 5;
    }
    r.n = 1 + i % 2;
    w.push_back(std::move(r));
  }
  return w;
}

class AsyncStepsGpu : public ::testing::TestWithParam<bool> {};  // graphs on / off

TEST_P(AsyncStepsGpu, GreedyIsBitwiseEqual) {
  expect_identical(base_config(GetParam()), greedy_workload());
}

TEST_P(AsyncStepsGpu, SeededSamplingWithPenaltiesIsBitwiseEqual) {
  expect_identical(base_config(GetParam()), sampled_workload());
}

TEST_P(AsyncStepsGpu, SparseProfileIsBitwiseEqual) {
  Config cfg = base_config(GetParam());
  cfg.sparsity = test::sparse_profile(Policy::kScored, 1, 128, 32, 4);
  std::mt19937 rng(7);
  std::vector<Request> w;
  for (int i = 0; i < 10; ++i) {
    Request r = request(rng, 40 + 37 * i % 300, 40 + i);  // past the capacity of 128 too
    r.params.temperature = i % 2 ? 0.8f : 0.0f;
    r.params.seed = 9 + i;
    r.params.frequency_penalty = 0.3f;
    w.push_back(std::move(r));
  }
  expect_identical(cfg, w);
}

INSTANTIATE_TEST_SUITE_P(Graphs, AsyncStepsGpu, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("graphs") : std::string("eager");
                         });

}  // namespace
}  // namespace strata::gputest
