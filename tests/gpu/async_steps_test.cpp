// The CUDA backend's native pipelined steps (scheduler.async_steps; cuda/backend/pipeline.cpp,
// docs/cuda-backend.md "Pipelined steps").
// Backend level (no scheduler, so both runs see exactly the same batches): hand-made plans on
// random:tiny run once through step() with the sampled tokens resolved on the host and once
// through submit/collect with every decode row pending (fed on the device) — tokens, logprobs,
// argmax and top lists bitwise equal for greedy (device argmax) and seeded sampling with
// penalties, logprobs and min_tokens with EOS live (device sampler, history fed on the device),
// eager and graphs, and the logits of a return_logits step in the middle (which runs
// synchronously after the pipelined ones, its pending rows resolved on the host) too.
// Engine level (integration: the real scheduler marks the pending rows): the same workloads
// through the engine with the synchronous and the pipelined loop — greedy, seeded sampling with
// penalties and n > 1, a scored sparse profile, graphs on and off; prompt logprobs against the
// teacher-forced logits. The two loops do not plan the
// same batches (request arrival and the pipelined admission differ; checked on the CPU) and the
// GPU rounds differently at another batch size, so here only the outline must be equal (tokens
// per stream, finish reasons, usage, no error) and most streams bitwise equal (a wrong feed
// derails every stream it touches); the pipelined run must have launched steps behind
// unfinished ones and fed pending rows on the device. Model: the tiny preset (2 layers), written
// by make_model (bit-identical to random:tiny; the engine needs its tokenizer files).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/engine.h"
#include "cuda/cuda_backend.h"
#include "cuda/testing/backend_probe.h"
#include "runtime/config.h"
#include "runtime/kept_positions.h"
#include "runtime/kv_layout.h"
#include "runtime/teacher_forcing.h"
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

// Every event (floats as bits), then one last line: the outline (tokens, finish, usage, error).
std::vector<std::string> trace(TokenStream& s) {
  std::vector<std::string> out;
  std::size_t tokens = 0;
  std::ostringstream outline;
  while (auto ev = s.next_blocking()) {
    tokens += ev->token_ids.size();
    if (ev->finish != FinishReason::kNone) outline << " f" << static_cast<int>(ev->finish);
    if (!ev->error.empty()) outline << " e'" << ev->error << "'";
    if (ev->usage)
      outline << " u" << ev->usage->prompt_tokens << "/" << ev->usage->completion_tokens;
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
  out.push_back("outline: " + std::to_string(tokens) + " tokens" + outline.str());
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

void expect_agree(const Config& cfg, const std::vector<Request>& reqs) {
  const Run a = run(cfg, false, reqs);
  const Run b = run(cfg, true, reqs);
  ASSERT_EQ(a.streams.size(), b.streams.size());
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.streams.size(); ++i) {
    EXPECT_EQ(a.streams[i].back(), b.streams[i].back()) << "request " << i << ": outline differs";
    EXPECT_EQ(b.streams[i].back().find(" e'"), std::string::npos) << b.streams[i].back();
    same += a.streams[i] == b.streams[i] ? 1 : 0;
  }
  EXPECT_GE(same * 10, a.streams.size() * 8) << "fewer than 80 % of the streams bitwise equal";
  EXPECT_EQ(a.counts.device_steps + a.counts.host_steps, 0) << "the synchronous run pipelined";
  EXPECT_GT(b.counts.device_steps, 0) << "no step was pipelined";
  EXPECT_GT(b.counts.fed_rows, 0) << "no pending row was fed on the device";
  EXPECT_GT(b.counts.overlapped, 0) << "no step was launched behind an unfinished one";
  std::printf(
      "engine: %zu/%zu streams bitwise equal; pipelined: %d device steps, %d synchronous, "
      "%d fed rows, %d overlapped\n",
      same, a.streams.size(), b.counts.device_steps, b.counts.host_steps, b.counts.fed_rows,
      b.counts.overlapped);
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
    // (EOS stays ignored: a stop seen one step late adds a row to the pipelined loop's next batch,
    // and another batch may round differently on the GPU; min_tokens with EOS live is covered at
    // the backend level, where both runs see the same batches.)
    r.n = 1 + i % 2;
    w.push_back(std::move(r));
  }
  return w;
}

// ---- backend level --------------------------------------------------------------------------

struct Seq {
  std::uint64_t id = 0;
  std::vector<std::int32_t> prompt;
  std::vector<std::vector<std::int32_t>> pages;  // per layer, every slot of the run
  SamplingParams params;
};

SeqStep seq_step(const Seq& q, int start, bool prefill, std::vector<std::int32_t> toks) {
  SeqStep s;
  s.seq_id = q.id;
  s.tokens = std::move(toks);
  s.start = start;
  s.prompt_len = static_cast<int>(q.prompt.size());
  s.prefill = prefill;
  s.sample = true;
  s.params = &q.params;
  s.prompt = &q.prompt;
  for (const auto& pl : q.pages) {
    LayerSlots ls;
    ls.valid = start;
    ls.pages = pl;
    s.layers.push_back(ls);
  }
  return s;
}

std::string row_trace(const SeqResult& r) {
  std::ostringstream o;
  o << r.seq_id << ":" << r.token << "/" << r.argmax << "/" << bits(r.logprob) << "{";
  for (const auto& t : r.top) o << t.token << ":" << bits(t.logprob) << ",";
  o << "}";
  if (!r.logits.empty()) {
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the logits' bits
    for (float f : r.logits) h = (h ^ bits(f)) * 1099511628211ull;
    o << " logits#" << h;
  }
  return o.str();
}

constexpr int kDecodeSteps = 24;
constexpr int kLogitsStep = 11;  // a return_logits step: synchronous inside the pipelined run

// The prefill step, then kDecodeSteps decode steps of every sequence; pipelined: every decode row
// pending (except the return_logits step's, which the engine would resolve the same way).
std::vector<std::string> run_backend(bool graphs, bool pipelined, const std::vector<Seq>& seqs,
                                     CudaBackendProbe::AsyncCounts* counts) {
  Config c;
  c.model.path = "random:tiny";
  c.model.seed = 7;
  c.model.max_model_len = 1024;
  c.cache.kv_bytes = 64ull << 20;
  c.scheduler.max_num_seqs = 8;
  c.scheduler.max_num_batched_tokens = 512;
  c.scheduler.async_steps = pipelined;
  c.backend.cuda_graphs = graphs;
  CudaBackend be(c, 0);
  std::vector<std::string> out;
  std::vector<std::vector<std::int32_t>> hist(seqs.size());  // collected outputs
  // Plans and their histories stay alive and unchanged until collected (the contract).
  std::deque<StepPlan> plans;
  std::deque<std::vector<std::vector<std::int32_t>>> snaps;
  auto take = [&](const StepResult& r) {
    for (std::size_t i = 0; i < r.seqs.size(); ++i) {
      out.push_back("step " + std::to_string(r.step_id) + " " + row_trace(r.seqs[i]));
      hist[i].push_back(r.seqs[i].token);
    }
  };
  for (int k = 0; k <= kDecodeSteps; ++k) {
    const bool logits_step = k == kLogitsStep;
    snaps.emplace_back(hist);
    StepPlan& p = plans.emplace_back();
    p.step_id = static_cast<std::uint64_t>(k + 1);
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      const Seq& q = seqs[i];
      const int P = static_cast<int>(q.prompt.size());
      SeqStep s;
      if (k == 0) {
        s = seq_step(q, 0, true, q.prompt);
      } else if (pipelined && !logits_step) {
        s = seq_step(q, P + k - 1, false, {kPendingToken});
        s.input_pending = true;
      } else {
        s = seq_step(q, P + k - 1, false, {0});  // filled below, once the token is known
      }
      s.return_logits = logits_step;
      p.seqs.push_back(std::move(s));
    }
    if (!pipelined) {
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        if (k > 0) p.seqs[i].tokens[0] = hist[i].back();
        p.seqs[i].output = &snaps.back()[i];
      }
      take(be.step(p));
      continue;
    }
    if (logits_step) {  // the engine resolves nothing itself: mark pending, the backend resolves
      for (std::size_t i = 0; i < seqs.size(); ++i) {
        p.seqs[i].tokens = {kPendingToken};
        p.seqs[i].input_pending = true;
      }
    }
    for (std::size_t i = 0; i < seqs.size(); ++i) p.seqs[i].output = &snaps.back()[i];
    be.submit(p);
    if (k > 0) take(be.collect());  // step k's rows exclude step k-1's token: pending
    while (plans.size() > 2) plans.pop_front(), snaps.pop_front();
  }
  if (pipelined) take(be.collect());  // (the synchronous run collected every step already)
  if (counts) *counts = CudaBackendProbe(be).async_counts();
  return out;
}

// Five sequences (prompts of 5 ... 97 tokens), each with its own pages for the whole run.
std::vector<Seq> backend_seqs(bool sampled, int layers) {
  std::mt19937 rng(3);
  std::vector<Seq> seqs;
  int next_page = 0;
  for (int i = 0; i < 5; ++i) {
    Seq q;
    q.id = 100 + static_cast<std::uint64_t>(i);
    const int P = 5 + 23 * i;
    for (int t = 0; t < P; ++t) q.prompt.push_back(static_cast<std::int32_t>(rng() % 200));
    q.pages.assign(static_cast<std::size_t>(layers), {});
    for (auto& pl : q.pages)
      for (int j = 0; j < pages_for_slots(P + kDecodeSteps + 1); ++j) pl.push_back(next_page++);
    q.params.temperature = 0.0f;
    q.params.ignore_eos = true;
    if (sampled) {
      q.params.temperature = i == 4 ? 0.0f : 0.8f;
      q.params.top_p = 0.9f;
      q.params.seed = 40 + static_cast<std::uint64_t>(i);
      q.params.repetition_penalty = 1.0f + 0.2f * static_cast<float>(i % 3);
      q.params.frequency_penalty = 0.5f * static_cast<float>((i + 1) % 3);
      q.params.presence_penalty = 0.3f * static_cast<float>(i % 2);
      q.params.logprobs = i % 2 ? 3 : -1;
      if (i == 1) {
        q.params.ignore_eos = false;
        q.params.min_tokens = 6;
      }
    }
    seqs.push_back(std::move(q));
  }
  return seqs;
}

void expect_backend_identical(bool graphs, bool sampled) {
  // The layer count of random:tiny decides the tables: ask a backend once.
  int layers = 0;
  {
    Config c;
    c.model.path = "random:tiny";
    c.model.seed = 7;
    c.model.max_model_len = 1024;
    c.cache.kv_bytes = 64ull << 20;
    c.scheduler.max_num_seqs = 8;
    layers = CudaBackend(c, 0).model().num_hidden_layers;
  }
  std::vector<Seq> seqs = backend_seqs(sampled, layers);
  CudaBackendProbe::AsyncCounts n;
  const std::vector<std::string> a = run_backend(graphs, false, seqs, nullptr);
  const std::vector<std::string> b = run_backend(graphs, true, seqs, &n);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "row " << i;
  EXPECT_EQ(n.host_steps, 1) << "only the return_logits step runs synchronously";
  EXPECT_EQ(n.device_steps, kDecodeSteps);
  EXPECT_GT(n.fed_rows, 0);
  EXPECT_GT(n.overlapped, 0);
}

// The census pipelines (report_kept no longer drains the pipeline, backend/census.cpp): a
// teacher-forced scored schedule (kSelect from scratch, then decodes that fill and cycle the
// ring) with every row asking for its kept positions and sampling greedily, through step() on
// one backend and through submit/collect (two steps out) on another: tokens, logprobs, argmax
// and the kept positions (every class and bin) bitwise equal, and no step ran synchronously.
TEST(AsyncStepsBackend, CensusStepsPipelineWithTheSameKeptPositions) {
  for (bool graphs : {false, true}) {
    const std::string what = graphs ? "graphs" : "eager";
    Config c;
    c.model.path = cached_model_dir("async", "tiny", 2, 11);
    c.model.max_model_len = 1024;
    c.cache.kv_bytes = 64ull << 20;
    c.scheduler.max_num_seqs = 8;
    c.scheduler.max_num_batched_tokens = 512;
    c.backend.cuda_graphs = graphs;
    c.backend.sparse_graphs = graphs;
    c.scheduler.async_steps = false;
    CudaBackend ref(c, 0);
    c.scheduler.async_steps = true;
    CudaBackend be(c, 0);
    const ModelConfig& mc = ref.model();
    std::vector<std::int32_t> ids(120);
    for (std::size_t i = 0; i < ids.size(); ++i)
      ids[i] = static_cast<std::int32_t>((i * 37 + 16) % static_cast<std::size_t>(mc.vocab_size));
    SparsityProfile prof = test::sparse_profile(Policy::kScored, 1, 48, 8, 4);
    prof.pool_kernel = 3;
    std::vector<StepPlan> plans = teacher_forcing_plans(mc, ids, prof, 80);
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    greedy.ignore_eos = true;
    const std::vector<std::int32_t> prompt(ids.begin(), ids.begin() + 80);
    const std::vector<std::int32_t> none;
    for (StepPlan& pl : plans)
      for (SeqStep& st : pl.seqs) {
        st.report_kept = true;
        st.return_logits = false;
        st.sample = true;
        st.params = &greedy;
        st.prompt = &prompt;
        st.output = &none;
      }
    auto kept_trace = [](const StepResult& r) {
      std::ostringstream o;
      o << "step " << r.step_id << " " << row_trace(r.seqs.at(0)) << " kept";
      for (const KeptPositions& k : r.seqs.at(0).kept) {
        o << " [" << k.sinks << "/" << k.middle << "/" << k.recent << ":";
        for (int b = 0; b < kPositionBins; ++b) o << k.bins[b] << ",";
        o << "]";
      }
      return o.str();
    };
    std::vector<std::string> a, b;
    for (const StepPlan& pl : plans) a.push_back(kept_trace(ref.step(pl)));
    for (std::size_t i = 0; i < plans.size(); ++i) {
      be.submit(plans[i]);  // (the plans live in `plans` until the end: the contract)
      if (i > 0) b.push_back(kept_trace(be.collect()));
    }
    b.push_back(kept_trace(be.collect()));
    ASSERT_EQ(a.size(), b.size()) << what;
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << what << " step " << i;
    EXPECT_FALSE(a.back().find(" kept [") == std::string::npos) << a.back();
    const CudaBackendProbe::AsyncCounts n = CudaBackendProbe(be).async_counts();
    EXPECT_EQ(n.host_steps, 0) << what << ": a census step ran synchronously";
    EXPECT_EQ(n.device_steps, static_cast<int>(plans.size())) << what;
    EXPECT_GT(n.overlapped, 0) << what;
  }
}

TEST(AsyncStepsBackend, GreedyEager) {
  expect_backend_identical(false, false);
}
TEST(AsyncStepsBackend, GreedyGraphs) {
  expect_backend_identical(true, false);
}
TEST(AsyncStepsBackend, SampledWithPenaltiesEager) {
  expect_backend_identical(false, true);
}
TEST(AsyncStepsBackend, SampledWithPenaltiesGraphs) {
  expect_backend_identical(true, true);
}

// ---- engine level ---------------------------------------------------------------------------

class AsyncStepsGpu : public ::testing::TestWithParam<bool> {};  // graphs on / off

TEST_P(AsyncStepsGpu, GreedyAgrees) {
  expect_agree(base_config(GetParam()), greedy_workload());
}

TEST_P(AsyncStepsGpu, SeededSamplingWithPenaltiesAgrees) {
  expect_agree(base_config(GetParam()), sampled_workload());
}

TEST_P(AsyncStepsGpu, SparseProfileAgrees) {
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
  expect_agree(cfg, w);
}

// Prompt logprobs through the engine on the CUDA backend (Request::prompt_logprobs; the batcher
// scores the rows of the prefill chunks that return their logits): prompts longer than the
// step's 96 tokens are chunked beside other requests' decodes, the chunk that ends a prompt also
// samples. Reference: the whole prompt's teacher-forced logits on a backend of its own, scored
// here in fp64. The engine's chunks and batches differ from the reference's one prefill, so the
// GPU's bf16 arithmetic rounds differently: bounded, not bitwise (mean |Δ| ≤ 2e-3, worst ≤ 5e-2
// nats; ranks equal at ≥ 95 % of the positions).
TEST_P(AsyncStepsGpu, PromptLogprobsMatchTheTeacherForcedLogits) {
  Config cfg = base_config(GetParam());
  cfg.scheduler.async_steps = true;
  std::mt19937 rng(21);
  std::vector<Request> w;
  for (int i = 0; i < 6; ++i) {
    Request r = request(rng, 20 + 53 * i, 6);  // 20 ... 285 tokens: up to 3 chunks of 96
    if (i % 2 == 0) r.prompt_logprobs = 3;
    w.push_back(std::move(r));
  }
  auto e = Engine::create(cfg, [](const Config& c) {
    std::vector<std::unique_ptr<Backend>> v;
    v.push_back(std::make_unique<CudaBackend>(c, 0));
    return v;
  });
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& q : w) ss.push_back(e->submit(q));
  std::vector<std::vector<TokenLogprob>> got(w.size());
  for (std::size_t i = 0; i < ss.size(); ++i) {
    std::size_t tokens = 0;
    while (auto ev = ss[i]->next_blocking()) {
      ASSERT_TRUE(ev->error.empty()) << ev->error;
      if (!ev->prompt_logprobs.empty()) {
        EXPECT_EQ(tokens, 0u) << "request " << i << ": prompt logprobs after a token";
        got[i] = ev->prompt_logprobs;
      }
      tokens += ev->token_ids.size();
    }
    EXPECT_EQ(tokens, 6u) << "request " << i;
  }
  e.reset();

  Config ref_cfg = cfg;  // teacher forcing prefills a whole prompt in one step
  ref_cfg.scheduler.max_num_batched_tokens = 1024;
  CudaBackend ref(ref_cfg, 0);
  const int V = ref.model().vocab_size;
  double sum = 0.0, worst = 0.0;
  std::size_t n = 0, same_rank = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const auto& p = *w[i].prompt_ids;
    if (w[i].prompt_logprobs < 0) {
      EXPECT_TRUE(got[i].empty()) << "request " << i << " did not ask";
      continue;
    }
    ASSERT_EQ(got[i].size(), p.size()) << "request " << i;
    const auto logits = teacher_forced_logits(ref, p, SparsityProfile{});
    for (std::size_t q = 1; q < p.size(); ++q) {
      const float* row = logits.data() + (q - 1) * static_cast<std::size_t>(V);
      double m = -INFINITY, z = 0.0;
      for (int v = 0; v < V; ++v) m = std::max(m, static_cast<double>(row[v]));
      for (int v = 0; v < V; ++v) z += std::exp(static_cast<double>(row[v]) - m);
      const double want = static_cast<double>(row[p[q]]) - m - std::log(z);
      const int rank =
          1 + static_cast<int>(std::count_if(row, row + V, [&](float x) { return x > row[p[q]]; }));
      const TokenLogprob& lp = got[i][q];
      EXPECT_EQ(lp.token, p[q]);
      EXPECT_EQ(lp.top.size(), 3u);
      const double d = std::abs(static_cast<double>(lp.logprob) - want);
      sum += d, worst = std::max(worst, d), ++n;
      same_rank += lp.rank == rank ? 1 : 0;
    }
  }
  std::printf(
      "prompt logprobs vs teacher forcing: %zu positions, mean |d| %.2e, worst %.2e, "
      "same rank %zu\n",
      n, sum / static_cast<double>(n), worst, same_rank);
  EXPECT_LE(sum / static_cast<double>(n), 2e-3);
  EXPECT_LE(worst, 5e-2);
  EXPECT_GE(same_rank * 100, n * 95);
}

INSTANTIATE_TEST_SUITE_P(Graphs, AsyncStepsGpu, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("graphs") : std::string("eager");
                         });

}  // namespace
}  // namespace strata::gputest
