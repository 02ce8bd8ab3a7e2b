// Engine integration tests on the CPU backend and a tiny random model: batch invariance,
// backpressure, aborts, preemption, intake errors, deadlines and shutdown.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <thread>

#include "engine_fixture.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata {
namespace {
using namespace strata::test;

int vocab_of(const Engine& e) {
  return e.model().vocab_size;
}

// ---- batch invariance --------------------------------------------------------------------

struct InvarianceCase {
  bool chunked;
  bool sparse;
};

class BatchInvariance : public ::testing::TestWithParam<InvarianceCase> {};

TEST_P(BatchInvariance, SixtyFourConcurrentRequestsMatchTheirSoloRuns) {
  const auto pc = GetParam();
  Config cfg = tiny_config();
  cfg.scheduler.max_num_seqs = 64;
  cfg.scheduler.chunked_prefill = pc.chunked;
  // Small enough that long prompts are split into chunks (and share steps with decodes).
  cfg.scheduler.max_num_batched_tokens = pc.chunked ? 96 : 512;
  if (pc.sparse) {
    cfg.sparsity.enabled = true;
    cfg.sparsity.full_layers = 1;
    cfg.sparsity.policy = Policy::kScored;
    cfg.sparsity.capacity = 40;
    cfg.sparsity.window = 8;
    cfg.sparsity.sinks = 2;
  }
  auto solo = Engine::create(cfg);
  auto batched = Engine::create(cfg);
  std::mt19937 rng(pc.chunked * 2 + pc.sparse + 7);
  std::vector<Request> reqs;
  for (int i = 0; i < 64; ++i) {
    const int len = 3 + static_cast<int>(rng() % 90);  // up to 92: past the capacity of 40
    reqs.push_back(greedy_request(random_prompt(rng, len, vocab_of(*solo)), 6 + i % 5));
  }
  std::vector<std::vector<std::int32_t>> alone;
  for (const auto& r : reqs) {
    auto s = solo->submit(r);
    auto c = drain(*s);
    ASSERT_EQ(c.finish[0], FinishReason::kLength) << c.error;
    alone.push_back(c.tokens[0]);
  }
  std::vector<std::shared_ptr<TokenStream>> streams;
  for (const auto& r : reqs) streams.push_back(batched->submit(r));
  for (std::size_t i = 0; i < streams.size(); ++i) {
    auto c = drain(*streams[i]);
    ASSERT_EQ(c.finish[0], FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens[0], alone[i]) << "request " << i << " (prompt " << reqs[i].prompt_ids->size()
                                     << " tokens) differs when batched";
    ASSERT_TRUE(c.usage.has_value());
    EXPECT_EQ(c.usage->completion_tokens, reqs[i].params.max_tokens);
    if (pc.sparse && reqs[i].prompt_ids->size() > 60) {
      EXPECT_GT(c.usage->compression_ratio, 1.0);
    }
  }
  const auto st = wait_stats(*batched, [](const EngineStats& s) { return s.pages_used == 0; });
  EXPECT_GE(st.mean_batch, 8.0) << "the engine did not really batch";
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.preemptions, 0u);
}

INSTANTIATE_TEST_SUITE_P(Modes, BatchInvariance,
                         ::testing::Values(InvarianceCase{false, false},
                                           InvarianceCase{true, false}, InvarianceCase{false, true},
                                           InvarianceCase{true, true}),
                         [](const auto& info) {
                           return std::string(info.param.chunked ? "Chunked" : "Whole") +
                                  (info.param.sparse ? "Sparse" : "Full");
                         });

// ---- backpressure ------------------------------------------------------------------------

TEST(Engine, ThousandRequestsOverWaitingLimitRefuseExactlyTheOverflow) {
  Config cfg = tiny_config();
  cfg.scheduler.max_waiting = 256;
  cfg.scheduler.max_num_seqs = 128;
  auto probe = std::make_shared<StepProbe>();
  probe->hold_step = 1;  // hold the first step so nothing leaves the waiting queue meanwhile
  auto e = Engine::create(cfg, probe_factory(probe));
  std::mt19937 rng(3);
  std::vector<std::shared_ptr<TokenStream>> accepted;
  std::vector<int> want;
  auto first = greedy_request(random_prompt(rng, 4, vocab_of(*e)), 3);
  accepted.push_back(e->submit(first));
  want.push_back(3);
  probe->wait_entered();  // the first request is running; the waiting queue is empty
  int refused = 0;
  for (int i = 1; i < 1000; ++i) {
    const int max_tokens = 2 + i % 3;
    try {
      accepted.push_back(
          e->submit(greedy_request(random_prompt(rng, 2 + i % 5, vocab_of(*e)), max_tokens)));
      want.push_back(max_tokens);
    } catch (const Overloaded& ex) {
      ++refused;
      EXPECT_NE(std::string(ex.what()).find("overloaded"), std::string::npos);
    }
  }
  EXPECT_EQ(accepted.size(), 1u + 256u);
  EXPECT_EQ(refused, 999 - 256);
  probe->release();
  for (std::size_t i = 0; i < accepted.size(); ++i) {
    auto c = drain(*accepted[i]);
    EXPECT_EQ(c.finish[0], FinishReason::kLength) << c.error;
    EXPECT_EQ(static_cast<int>(c.tokens[0].size()), want[i]);
  }
  const auto st =
      wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0 && s.running == 0; });
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.requests_refused, 743u);
  EXPECT_EQ(st.requests_finished, 257u);
  // Room again: a new request is accepted.
  auto again = e->submit(greedy_request({11, 12, 13}, 2));
  EXPECT_EQ(drain(*again).tokens[0].size(), 2u);
}

// ---- aborts ------------------------------------------------------------------------------

TEST(Engine, AbortingHundredRequestsFreesTheirPagesWithinOneStep) {
  Config cfg = tiny_config();
  cfg.scheduler.max_num_seqs = 256;
  cfg.scheduler.max_num_batched_tokens = 8192;
  // Pages back on the free list: with the prefix cache on, an aborted prompt's full blocks
  // would stay cached (unused, evictable: counted free, but not released to the backend).
  cfg.cache.prefix_cache = false;
  std::mt19937 rng(11);
  std::vector<Request> reqs;
  for (int i = 0; i < 200; ++i)
    reqs.push_back(greedy_request(random_prompt(rng, 3 + i % 20, 200), 12));

  // Reference: the same requests, nothing aborted.
  std::vector<std::vector<std::int32_t>> ref;
  {
    auto e = Engine::create(cfg);
    std::vector<std::shared_ptr<TokenStream>> ss;
    for (const auto& r : reqs) ss.push_back(e->submit(r));
    for (auto& s : ss) ref.push_back(drain(*s).tokens[0]);
  }

  // Step 1 waits until all 200 are submitted (a slow submitting thread would otherwise spread
  // the prefills over several steps); the aborts land while the first step that decodes all 200
  // and nothing else is held.
  auto probe = std::make_shared<StepProbe>();
  probe->gate = true;
  probe->hold_decoding = 200;
  auto e = Engine::create(cfg, probe_factory(probe));
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& r : reqs) ss.push_back(e->submit(r));
  probe->open_gate();
  probe->wait_entered();
  std::vector<int> order(200);
  for (int i = 0; i < 200; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::set<int> aborted(order.begin(), order.begin() + 100);
  for (int i : aborted) e->abort(ss[i]->id());
  probe->release();

  for (int i = 0; i < 200; ++i) {
    auto c = drain(*ss[i]);
    if (aborted.count(i)) {
      EXPECT_EQ(c.finish[0], FinishReason::kAbort);
      EXPECT_LT(c.tokens[0].size(), 12u);
    } else {
      EXPECT_EQ(c.finish[0], FinishReason::kLength);
      EXPECT_EQ(c.tokens[0], ref[i]) << "survivor " << i << " changed";
    }
  }
  std::lock_guard<std::mutex> l(probe->mu);
  ASSERT_GT(probe->plans.size(), probe->held_index + 1);
  const StepPlan& held = probe->plans[probe->held_index];
  const StepPlan& next = probe->plans[probe->held_index + 1];
  ASSERT_EQ(held.seqs.size(), 200u);
  // The step after the aborts runs exactly the survivors, and every page the aborted
  // sequences held is back: listed as released in that plan, or (freed pages are reused
  // first) already in a survivor's table — never still owned by an aborted sequence.
  EXPECT_EQ(next.seqs.size(), 100u);
  std::set<std::uint64_t> survivors;
  std::map<std::int32_t, std::uint64_t> owner;  // page -> sequence in the next step
  for (const auto& s : next.seqs) {
    survivors.insert(s.seq_id);
    for (const auto& layer : s.layers) {
      for (const auto p : layer.pages) {
        auto [it, fresh] = owner.emplace(p, s.seq_id);
        EXPECT_TRUE(fresh || it->second == s.seq_id) << "page " << p << " owned twice";
      }
    }
  }
  std::set<std::int32_t> released(next.released_pages.begin(), next.released_pages.end());
  int aborted_seqs = 0;
  for (const auto& s : held.seqs) {
    if (survivors.count(s.seq_id)) continue;
    ++aborted_seqs;
    for (const auto& layer : s.layers) {
      for (const auto p : layer.pages) {
        EXPECT_TRUE(released.count(p) || owner.count(p)) << "page " << p << " not freed";
      }
    }
  }
  EXPECT_GT(released.size(), 100u);
  EXPECT_EQ(aborted_seqs, 100);
  const auto st = wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0; });
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.requests_aborted, 100u);
}

TEST(Engine, DroppingAStreamAbortsItsRequest) {
  auto e = Engine::create(tiny_config());
  {
    auto s = e->submit(greedy_request({5, 6, 7, 8}, 2000));
    ASSERT_TRUE(s->next_blocking().has_value());
  }
  const auto st = wait_stats(
      *e, [](const EngineStats& s) { return s.requests_aborted == 1 && s.pages_used == 0; });
  EXPECT_EQ(st.requests_aborted, 1u);
  EXPECT_EQ(st.pages_used, 0);
}

// Each request is counted once, as aborted or as finished: the server aborts a request both
// when it sees the client go and when its response loop ends, and those repeated aborts (and
// one after the end) used to be counted again, so finished + aborted exceeded the requests.
TEST(Engine, RepeatedAbortsCountARequestOnce) {
  auto e = Engine::create(tiny_config());
  auto a = e->submit(greedy_request({5, 6, 7, 8}, 2000));
  auto b = e->submit(greedy_request({9, 10, 11}, 2000));
  ASSERT_TRUE(a->next_blocking().has_value());
  ASSERT_TRUE(b->next_blocking().has_value());
  for (int i = 0; i < 3; ++i) e->abort(a->id());  // while steps are running
  e->abort(b->id());
  e->abort(b->id());
  auto c = e->submit(greedy_request({12, 13}, 2));
  const auto done = drain(*c);
  EXPECT_EQ(done.finish.at(0), FinishReason::kLength);
  e->abort(c->id());  // after its end: nothing to abort
  auto st = wait_stats(*e, [](const EngineStats& s) {
    return s.pages_used == 0 && s.requests_aborted + s.requests_finished >= 3;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  st = e->stats();
  EXPECT_EQ(st.pages_used, 0);
  EXPECT_EQ(st.requests_aborted, 2u);
  EXPECT_EQ(st.requests_finished, 1u);
}

// ---- preemption --------------------------------------------------------------------------

TEST(Engine, PreemptionByRecomputeKeepsGreedyOutputs) {
  Config cfg = tiny_config();
  std::mt19937 rng(5);
  std::vector<Request> reqs;
  for (int i = 0; i < 12; ++i) reqs.push_back(greedy_request(random_prompt(rng, 20, 200), 40));
  std::vector<std::vector<std::int32_t>> ref;
  {
    auto e = Engine::create(cfg);
    for (const auto& r : reqs) ref.push_back(drain(*e->submit(r)).tokens[0]);
  }
  // 3 layers x 4 pages per sequence at the end; a pool of 60 pages cannot hold 12 at once.
  const std::size_t page_bytes = 2 * 2 * 16 * 16 * 4;  // K+V, 2 kv heads, 16 slots, dim 16, fp32
  cfg.cache.cpu_kv_bytes = 60 * page_bytes;
  auto e = Engine::create(cfg);
  std::vector<std::shared_ptr<TokenStream>> ss;
  for (const auto& r : reqs) ss.push_back(e->submit(r));
  for (std::size_t i = 0; i < ss.size(); ++i) {
    auto c = drain(*ss[i]);
    EXPECT_EQ(c.finish[0], FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens[0], ref[i]) << "request " << i;
  }
  const auto st =
      wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0 && s.steps > 0; });
  EXPECT_GT(st.preemptions, 0u) << "the pool was meant to force preemptions";
  EXPECT_EQ(st.pages_total, 60);
  EXPECT_EQ(st.pages_used, 0);
}

// ---- intake ------------------------------------------------------------------------------

TEST(Engine, IntakeRejectsBadRequestsWithNothingQueued) {
  Config cfg = tiny_config();
  cfg.model.max_model_len = 64;
  auto e = Engine::create(cfg);
  Request none;
  EXPECT_THROW(e->submit(none), InvalidRequest);
  auto over = greedy_request(std::vector<std::int32_t>(60, 9), 10);
  try {
    e->submit(over);
    ADD_FAILURE() << "over-long request accepted";
  } catch (const InvalidRequest& ex) {
    EXPECT_EQ(ex.param(), "max_tokens");
    const std::string m = ex.what();
    EXPECT_NE(m.find("64"), std::string::npos) << m;
    EXPECT_NE(m.find("60"), std::string::npos) << m;
  }
  EXPECT_THROW(e->submit(greedy_request({1, 2, vocab_of(*e) + 5}, 2)), InvalidRequest);
  auto negative = greedy_request({1, 2}, -1);
  EXPECT_THROW(e->submit(negative), InvalidRequest);
  // A prompt that alone fills the context is the prompt's fault, worded alike for ids, text
  // and messages.
  for (int form = 0; form < 3; ++form) {
    Request r = greedy_request(std::vector<std::int32_t>(64, 9), 0);
    if (form > 0) r.prompt_ids.reset();
    if (form == 1) r.prompt_text = std::string(400, 'a');
    if (form == 2) r.messages = std::vector<ChatMessage>{{"user", std::string(400, 'a')}};
    try {
      e->submit(r);
      ADD_FAILURE() << "over-long prompt accepted (form " << form << ")";
    } catch (const InvalidRequest& ex) {
      EXPECT_EQ(ex.param(), form == 2 ? "messages" : "prompt");
      EXPECT_NE(std::string(ex.what()).find("maximum context length is 64 tokens. However, the "),
                std::string::npos)
          << ex.what();
    }
  }
  auto badp = greedy_request({1, 2}, 2);
  badp.params.top_p = 2.0f;
  EXPECT_THROW(e->submit(badp), InvalidRequest);
  auto bads = greedy_request({1, 2}, 2);
  SparsityProfile sp;
  sp.enabled = true;
  sp.capacity = 4;  // below sinks + window + 1
  bads.sparsity = sp;
  try {
    e->submit(bads);
    ADD_FAILURE() << "bad kv_sparsity accepted";
  } catch (const InvalidRequest& ex) {
    EXPECT_EQ(ex.param(), "kv_sparsity.capacity");  // the request's field, not sparsity.*
    EXPECT_EQ(std::string(ex.what()).rfind("kv_sparsity.capacity: ", 0), 0u) << ex.what();
  }
  const auto st = e->stats();
  EXPECT_EQ(st.waiting + st.running, 0);
  // A good one still works.
  EXPECT_EQ(drain(*e->submit(greedy_request({1, 2, 3}, 3))).tokens[0].size(), 3u);
  // max_tokens 0: what remains of the context (a chat request without max_tokens).
  auto rest = greedy_request(std::vector<std::int32_t>(60, 9), 0);
  rest.params.ignore_eos = true;
  const auto c = drain(*e->submit(rest));
  EXPECT_EQ(c.tokens[0].size(), 4u);
  EXPECT_EQ(c.finish[0], FinishReason::kLength);
}

// vLLM's skip_special_tokens (default true) and truncate_prompt_tokens.
TEST(Engine, SpecialTokensLeaveTheTextAndPromptsTruncateFromTheLeft) {
  auto e = Engine::create(tiny_config());
  const auto ids = e->tokenizer().encode("<|end_header_id|>", /*allow_special=*/true);
  ASSERT_EQ(ids.size(), 1u);
  ASSERT_TRUE(e->tokenizer().is_special(ids[0]));
  auto r = greedy_request({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 3);
  r.params.logit_bias = {{ids[0], 100.0f}};  // the special token, every step
  auto c = drain(*e->submit(r));
  EXPECT_EQ(c.tokens[0], std::vector<std::int32_t>(3, ids[0]));
  EXPECT_EQ(c.text[0], "");  // ids reported, text without them
  r.skip_special_tokens = false;
  r.truncate_prompt_tokens = 4;
  c = drain(*e->submit(r));
  EXPECT_EQ(c.text[0], "<|end_header_id|><|end_header_id|><|end_header_id|>");
  ASSERT_TRUE(c.usage);
  EXPECT_EQ(c.usage->prompt_tokens, 4);  // the last 4 of 10
}

TEST(Engine, TextPromptsStreamValidUtf8AndUsage) {
  auto e = Engine::create(tiny_config());
  Request r;
  r.prompt_text = "Hello, world! Ünïcödé";
  r.params.max_tokens = 10;
  r.params.temperature = 0.8f;
  r.params.seed = 42;
  r.params.ignore_eos = true;
  r.n = 2;
  auto c = drain(*e->submit(r), 2);
  ASSERT_EQ(c.finish[0], FinishReason::kLength);
  ASSERT_EQ(c.finish[1], FinishReason::kLength);
  ASSERT_TRUE(c.usage.has_value());
  EXPECT_EQ(c.usage->completion_tokens, 20);
  EXPECT_GT(c.usage->prompt_tokens, 3);
  EXPECT_GE(c.usage->ttft_ms, c.usage->queue_ms);
  EXPECT_GE(c.usage->e2e_ms, c.usage->ttft_ms);
  EXPECT_NE(c.tokens[0], c.tokens[1]) << "choices share a seed";
  // Same seed, same tokens (seeded sampling is stateless in time).
  auto c2 = drain(*e->submit(r), 2);
  EXPECT_EQ(c.tokens, c2.tokens);
  // The streamed text is what the tokenizer decodes from the tokens (special tokens left
  // out: skip_special_tokens is the default).
  EXPECT_EQ(c.text[0], e->tokenizer().decode(c.tokens[0], /*skip_special=*/true));
}

TEST(Engine, StopStringsAreWithheldAndNeverEmitted) {
  auto e = Engine::create(tiny_config());
  auto base = greedy_request({3, 1, 4, 1, 5, 9, 2, 6}, 24);
  auto full = drain(*e->submit(base));
  const std::string text = full.text[0];
  ASSERT_GE(text.size(), 6u) << "the model produced too little text to test stops";
  // A stop string from the middle of the output (ASCII-safe cut at a character boundary).
  std::size_t cut = text.size() / 2;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  std::size_t end = cut + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  const std::string stop = text.substr(cut, end - cut);
  auto r = base;
  r.params.stop = {stop};
  auto c = drain(*e->submit(r));
  EXPECT_EQ(c.finish[0], FinishReason::kStop);
  const std::size_t first = text.find(stop);
  EXPECT_EQ(c.text[0], text.substr(0, first));
  EXPECT_EQ(c.text[0].find(stop), std::string::npos);
}

TEST(Engine, DeadlineFinishesWithTimeout) {
  auto e = Engine::create(tiny_config());
  auto r = greedy_request({1, 2, 3, 4}, 4000);
  r.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  auto c = drain(*e->submit(r));
  EXPECT_EQ(c.finish[0], FinishReason::kTimeout);
  EXPECT_LT(c.tokens[0].size(), 4000u);
  const auto st = wait_stats(*e, [](const EngineStats& s) { return s.pages_used == 0; });
  EXPECT_EQ(st.pages_used, 0);
}

TEST(Engine, ShutdownFinishesRunningWorkThenAbortsTheRest) {
  auto e = Engine::create(tiny_config());
  auto quick = e->submit(greedy_request({1, 2, 3}, 2));
  auto slow = e->submit(greedy_request({4, 5, 6}, 5000));
  std::thread t([&] { e->shutdown(std::chrono::milliseconds(200)); });
  auto q = drain(*quick);
  auto s = drain(*slow);
  t.join();
  EXPECT_EQ(q.finish[0], FinishReason::kLength);
  EXPECT_EQ(s.finish[0], FinishReason::kAbort);
  EXPECT_THROW(e->submit(greedy_request({1}, 1)), Overloaded);
}

TEST(Engine, UpdateSparsityValidatesAndVersions) {
  auto e = Engine::create(tiny_config());
  const auto v0 = e->stats().profile_version;
  SparsityProfile bad;
  bad.enabled = true;
  bad.capacity = 3;
  EXPECT_THROW(e->update_sparsity(bad), ConfigError);
  const SparsityProfile good = sparse_profile(Policy::kScored, 1, 32, 8, 2);
  const auto v1 = e->update_sparsity(good);
  EXPECT_GT(v1, v0);
  EXPECT_EQ(e->stats().profile_version, v1);
  EXPECT_TRUE(e->stats().profile.enabled);
  // A long prompt now runs sparse.
  std::mt19937 rng(1);
  auto c = drain(*e->submit(greedy_request(random_prompt(rng, 100, 200), 4)));
  ASSERT_TRUE(c.usage.has_value());
  EXPECT_GT(c.usage->compression_ratio, 1.2);
}

// A backend that cannot run sparse layers (BackendInfo::sparse_refusal: the CUDA backend with
// cache.kv_dtype fp8).
class NoSparseBackend final : public ForwardingBackend {
 public:
  explicit NoSparseBackend(std::unique_ptr<Backend> inner)
      : ForwardingBackend(std::move(inner)), info_(ForwardingBackend::info()) {
    info_.sparse_refusal = "no e4m3 sparse kernels";
  }
  const BackendInfo& info() const override { return info_; }

 private:
  BackendInfo info_;
};

// Publishing a profile that enables sparsity on such a backend is refused before it reaches the
// cache manager: the version stays, requests keep running the full cache, and a profile that
// keeps sparsity off is still published.
TEST(Engine, UpdateSparsityRefusesWhatTheBackendCannotRun) {
  auto e = Engine::create(tiny_config(), decorated_cpu_factory<NoSparseBackend>());
  const auto v0 = e->stats().profile_version;
  const SparsityProfile sparse = sparse_profile(Policy::kScored, 1, 32, 8, 2);
  try {
    e->update_sparsity(sparse);
    ADD_FAILURE() << "a sparse profile was published on a backend that cannot run it";
  } catch (const ConfigError& x) {
    EXPECT_EQ(x.key(), "sparsity.enabled");
    EXPECT_NE(std::string(x.what()).find("no e4m3 sparse kernels"), std::string::npos) << x.what();
  }
  EXPECT_EQ(e->stats().profile_version, v0);
  EXPECT_FALSE(e->stats().profile.enabled);
  std::mt19937 rng(1);
  auto c = drain(*e->submit(greedy_request(random_prompt(rng, 100, 200), 4)));
  EXPECT_TRUE(c.error.empty()) << c.error;
  ASSERT_TRUE(c.usage.has_value());
  EXPECT_DOUBLE_EQ(c.usage->compression_ratio, 1.0);
  SparsityProfile off = sparse;
  off.enabled = false;
  EXPECT_GT(e->update_sparsity(off), v0);
  // Nor does an engine start with sparsity on over such a backend.
  Config cfg = tiny_config();
  cfg.sparsity = sparse;
  EXPECT_THROW(Engine::create(cfg, decorated_cpu_factory<NoSparseBackend>()), ConfigError);
}

// ---- GPU idle between steps (issue 24 item 4) ---------------------------------------------

// A backend reporting a fixed device time and device gap per step, as the CUDA backend measures
// them with events (StepStats::device_gap_ms).
class GapBackend final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  StepResult step(const StepPlan& plan) override {
    StepResult r = ForwardingBackend::step(plan);
    r.stats.device_ms = 3.0;
    r.stats.device_gap_ms = 1.0;
    return r;
  }
};

TEST(Engine, GpuIdleCountsGapsOnlyWhileSequencesRun) {
  auto e = Engine::create(tiny_config(), decorated_cpu_factory<GapBackend>());
  // Two requests one after the other: the engine runs dry between them, and the gap before the
  // second one's first step is the server waiting for work, not overhead.
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(drain(*e->submit(greedy_request({5, 6, 7, 8}, 6))).tokens[0].size(), 6u);
  const EngineStats st = wait_stats(
      *e, [](const EngineStats& s) { return s.running == 0 && s.requests_finished == 2; });
  ASSERT_GE(st.steps, 4u);
  EXPECT_EQ(st.gpu_idle_steps, st.steps - 2) << "one uncounted gap per busy period";
  const double gaps_ms = static_cast<double>(st.gpu_idle_steps), busy_ms = 3.0 * st.steps;
  EXPECT_DOUBLE_EQ(st.gpu_idle_ratio, gaps_ms / (gaps_ms + busy_ms));

  // The CPU backend measures no device gaps: nothing is counted (the metric is not exported).
  auto plain = Engine::create(tiny_config());
  drain(*plain->submit(greedy_request({5, 6, 7, 8}, 3)));
  const EngineStats ps = wait_stats(
      *plain, [](const EngineStats& s) { return s.running == 0 && s.requests_finished == 1; });
  EXPECT_EQ(ps.gpu_idle_steps, 0u);
  EXPECT_EQ(ps.gpu_idle_ratio, 0.0);
}

// ---- Host overhead over the time a step was in flight ---------------------------------------

TEST(InflightTime, IsTheUnionOfOrderedIntervals) {
  InflightTime t;
  t.add(0, 10);   // 10
  t.add(5, 15);   // overlaps the first: +5
  t.add(15, 20);  // touches: +5
  t.add(16, 19);  // inside the last: +0
  t.add(30, 40);  // a gap, then +10
  EXPECT_DOUBLE_EQ(t.total(), 30.0);
  InflightTime one;
  one.add(2, 2);
  EXPECT_DOUBLE_EQ(one.total(), 0.0);
}

// The pipelined loop starts step n + 1 before step n's completion is handled, so the per-step
// walls overlap: host overhead is measured against their union (inflight_ms), which with the
// synchronous loop equals their sum. (It read ~50 % on the H200 with the GPU 99 % busy.)
TEST(Engine, HostOverheadIsOverTheTimeAStepWasInFlight) {
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "pipelined" : "synchronous");
    Config cfg = tiny_config();
    cfg.scheduler.async_steps = async;
    auto e = Engine::create(cfg, decorated_cpu_factory<GapBackend>());
    EXPECT_EQ(drain(*e->submit(greedy_request({5, 6, 7, 8}, 24))).tokens[0].size(), 24u);
    const EngineStats st = wait_stats(
        *e, [](const EngineStats& s) { return s.running == 0 && s.requests_finished == 1; });
    const StepTimings& tm = st.timings;
    ASSERT_GE(tm.steps, 20u);
    ASSERT_GT(tm.inflight_ms, 0.0);
    if (async)
      EXPECT_LT(tm.inflight_ms, tm.wall_ms) << "pipelined steps overlap";
    else
      EXPECT_NEAR(tm.inflight_ms, tm.wall_ms, 1e-9 * tm.wall_ms) << "no overlap: the sum";
    EXPECT_NEAR(st.host_overhead, std::max(0.0, 1.0 - tm.device_ms / tm.inflight_ms), 1e-12);
  }
}

}  // namespace
}  // namespace strata
