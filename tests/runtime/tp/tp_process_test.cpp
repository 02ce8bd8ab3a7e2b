// Tensor-parallel ranks in separate processes (docs/tensor-parallel.md "Separate processes"),
// with threads standing in for the processes over real TCP connections on 127.0.0.1: the
// StepPlan wire format (runtime/tp/tp_wire.h), the TCP collectives (runtime/tp/tcp_comm.h)
// against the in-process TpComm, and rank 0 + a proxied follower (runtime/tp/tp_remote.h)
// against the in-process TP=2 group.
#include <gtest/gtest.h>

#include <future>
#include <random>
#include <thread>

#include "runtime/tp/tcp_comm.h"
#include "runtime/cpu/tp_process.h"
#include "runtime/error.h"
#include "runtime/teacher_forcing.h"
#include "runtime/tp/tp_group.h"
#include "runtime/tp/tp_link.h"
#include "runtime/tp/tp_remote.h"
#include "runtime/tp/tp_wire.h"
#include "tests/runtime/cpu_test_util.h"
#include "tests/runtime/sparsity_test_util.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// Rank 0's mesh and the followers' meshes of one group on an ephemeral port.
struct Meshes {
  TpMesh zero;
  std::vector<TpMesh> others;  // rank r at index r - 1
};
Meshes connect_group(int size, std::chrono::milliseconds timeout = 10s) {
  std::promise<std::uint16_t> port;
  auto zero = std::async(std::launch::async, [&] {
    return tp_mesh_accept({"127.0.0.1", 0}, size, timeout,
                          [&](std::uint16_t p) { port.set_value(p); });
  });
  const TpEndpoint at{"127.0.0.1", port.get_future().get()};
  std::vector<std::future<TpMesh>> f;
  for (int r = 1; r < size; ++r)
    f.push_back(
        std::async(std::launch::async, [=] { return tp_mesh_connect(at, r, size, timeout); }));
  Meshes m;
  for (auto& x : f) m.others.push_back(x.get());
  m.zero = zero.get();
  return m;
}

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(TpWire, PlanRoundTrip) {
  SamplingParams params;
  std::vector<std::int32_t> prompt{1, 2, 3}, output{4};
  StepPlan p;
  p.step_id = 0x123456789abcull;
  p.released_pages = {7, 9, 11};
  for (int i = 0; i < 3; ++i) {
    SeqStep s;
    s.seq_id = 1000 + static_cast<std::uint64_t>(i);
    s.tokens = i == 2 ? std::vector<std::int32_t>{42} : std::vector<std::int32_t>{5, 6, 7, -1};
    s.start = 10 * i;
    s.prompt_len = 100 + i;
    s.prefill = i != 2;
    s.sample = i != 0;
    s.return_logits = i == 0;
    if (i == 1) {  // sampled with inputs; i == 2 sampled without (a bad plan travels as such)
      s.params = &params;
      s.prompt = &prompt;
      s.output = &output;
    }
    for (int l = 0; l < 4; ++l) {
      LayerSlots ls;
      ls.rule.policy = static_cast<Policy>(l);
      ls.rule.capacity = 48 + l;
      ls.rule.ring = l;
      ls.rule.sinks = 4;
      ls.rule.window = 16;
      ls.rule.pool = l % 2 ? PoolKind::kAvg : PoolKind::kMax;
      ls.rule.pool_kernel = 2 * l + 1;
      ls.valid = 33 + l + i;
      ls.ring_pos = l;
      ls.pages = {l, l + 5, 1 << 20};
      if (l == 2) ls.temp_pages = {3, 4};
      ls.action = static_cast<LayerAction>(l % 3);
      ls.shrink_to = 17 * l;
      s.layers.push_back(ls);
    }
    p.seqs.push_back(s);
  }
  const auto bytes = encode_plan(p);
  WirePlan w;
  decode_plan(bytes.data(), bytes.size(), w);
  const auto& q = w.plan;
  EXPECT_EQ(q.step_id, p.step_id);
  EXPECT_EQ(q.released_pages, p.released_pages);
  ASSERT_EQ(q.seqs.size(), p.seqs.size());
  for (std::size_t i = 0; i < p.seqs.size(); ++i) {
    const auto &a = p.seqs[i], &b = q.seqs[i];
    EXPECT_EQ(b.seq_id, a.seq_id);
    EXPECT_EQ(b.tokens, a.tokens);
    EXPECT_EQ(b.start, a.start);
    EXPECT_EQ(b.prompt_len, a.prompt_len);
    EXPECT_EQ(b.prefill, a.prefill);
    EXPECT_EQ(b.sample, a.sample);
    EXPECT_EQ(b.return_logits, a.return_logits);
    // Rank 0's sampling inputs never travel: placeholders only where rank 0 had them.
    EXPECT_EQ(b.params != nullptr, a.params != nullptr) << i;
    EXPECT_EQ(b.output != nullptr, a.output != nullptr) << i;
    if (b.params) {
      EXPECT_NE(b.params, a.params);
      EXPECT_NE(b.output, a.output);
    }
    ASSERT_EQ(b.layers.size(), a.layers.size());
    for (std::size_t l = 0; l < a.layers.size(); ++l) {
      const auto &x = a.layers[l], &y = b.layers[l];
      EXPECT_EQ(y.rule.policy, x.rule.policy);
      EXPECT_EQ(y.rule.capacity, x.rule.capacity);
      EXPECT_EQ(y.rule.ring, x.rule.ring);
      EXPECT_EQ(y.rule.sinks, x.rule.sinks);
      EXPECT_EQ(y.rule.window, x.rule.window);
      EXPECT_EQ(y.rule.pool, x.rule.pool);
      EXPECT_EQ(y.rule.pool_kernel, x.rule.pool_kernel);
      EXPECT_EQ(y.valid, x.valid);
      EXPECT_EQ(y.ring_pos, x.ring_pos);
      EXPECT_EQ(y.pages, x.pages);
      EXPECT_EQ(y.temp_pages, x.temp_pages);
      EXPECT_EQ(y.action, x.action);
      EXPECT_EQ(y.shrink_to, x.shrink_to);
    }
  }
  EXPECT_EQ(encode_plan(q), bytes);  // a second trip changes nothing

  // Truncated or padded bytes are refused, never read past the end.
  for (std::size_t cut : {std::size_t{0}, std::size_t{3}, bytes.size() / 2, bytes.size() - 1}) {
    WirePlan t;
    EXPECT_THROW(decode_plan(bytes.data(), cut, t), InternalError) << cut;
  }
  auto padded = bytes;
  padded.push_back(0);
  WirePlan t;
  EXPECT_THROW(decode_plan(padded.data(), padded.size(), t), InternalError);

  WireReply r;
  r.step_id = 77;
  r.ok = false;
  r.error = "rank 1 failed: page id 9999 outside the pool";
  r.device_ms = 1.25;
  const auto rb = encode_reply(r);
  const auto r2 = decode_reply(rb.data(), rb.size());
  EXPECT_EQ(r2.step_id, 77u);
  EXPECT_FALSE(r2.ok);
  EXPECT_EQ(r2.error, r.error);
  EXPECT_EQ(r2.device_ms, 1.25);
  EXPECT_FALSE(r2.group_failed);
  EXPECT_THROW(decode_reply(rb.data(), rb.size() - 1), InternalError);
  r.group_failed = true;  // the rank's communicator failed with the step
  const auto rg = encode_reply(r);
  EXPECT_EQ(rg.size(), rb.size());
  const auto r3 = decode_reply(rg.data(), rg.size());
  EXPECT_FALSE(r3.ok);
  EXPECT_TRUE(r3.group_failed);
  r.ok = true;
  r.group_failed = false;
  const auto ro = encode_reply(r);
  EXPECT_TRUE(decode_reply(ro.data(), ro.size()).ok);
  auto bad = rg;
  bad[12] = 3;  // the status byte after magic and step id
  EXPECT_THROW(decode_reply(bad.data(), bad.size()), InternalError);
}

// 3 ranks over TCP give the in-process TpComm's results bit for bit (same rank order).
TEST(TcpComm, StarEqualsInProcessBitForBit) {
  constexpr int n = 3;
  auto m = connect_group(n);
  std::vector<std::shared_ptr<cpu::Collectives>> tcp;
  tcp.push_back(std::make_shared<cpu::TcpComm>(0, n, m.zero.data, 10s));
  for (int r = 1; r < n; ++r)
    tcp.push_back(std::make_shared<cpu::TcpComm>(r, n, m.others[r - 1].data, 10s));
  auto local = std::make_shared<cpu::TpComm>(n);

  // Values whose sum depends on the order of the additions.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1e4f, 1e4f);
  std::vector<std::vector<std::vector<float>>> in(20);  // [round][rank][i]
  for (auto& round : in) {
    round.resize(n);
    for (auto& v : round) {
      v.resize(1000);
      for (auto& x : v) x = u(rng) * (rng() % 2 ? 1e-3f : 1.0f);
    }
  }
  auto run = [&](const std::vector<std::shared_ptr<cpu::Collectives>>& comms) {
    std::vector<std::vector<float>> out(n), gathered(n), all(n);
    std::vector<std::thread> th;
    for (int r = 0; r < n; ++r)
      th.emplace_back([&, r] {
        auto& c = *comms[static_cast<std::size_t>(r)];
        for (auto& round : in) {
          auto v = round[static_cast<std::size_t>(r)];
          c.all_reduce_sum(r, v.data(), v.size());
          out[r].insert(out[r].end(), v.begin(), v.end());
        }
        std::vector<float> mine(static_cast<std::size_t>(r + 1), static_cast<float>(r));
        c.gather(r, mine.data(), mine.size(), r == 0 ? &gathered[0] : nullptr);
        c.all_gather(r, mine.data(), mine.size(), all[r]);
      });
    for (auto& t : th) t.join();
    return std::make_tuple(out, gathered[0], all);
  };
  const auto [got, got_g, got_all] = run(tcp);
  const auto [ref, ref_g, ref_all] = run({local, local, local});
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(got[r].size(), 20000u);
    EXPECT_EQ(std::memcmp(got[r].data(), ref[0].data(), got[r].size() * 4), 0) << "rank " << r;
    EXPECT_EQ(got_all[r], (std::vector<float>{0, 1, 1, 2, 2, 2}));
  }
  EXPECT_EQ(got_g, (std::vector<float>{0, 1, 1, 2, 2, 2}));
  EXPECT_EQ(got_g, ref_g);
}

TEST(TcpComm, AbortTimeoutAndDisconnectNeverHang) {
  // A failing follower aborts: rank 0, waiting in an all-reduce, throws with its reason.
  {
    auto m = connect_group(2);
    cpu::TcpComm c0(0, 2, m.zero.data, 30s), c1(1, 2, m.others[0].data, 30s);
    auto f = std::async(std::launch::async, [&] {
      float x = 1;
      return what_of([&] { c0.all_reduce_sum(0, &x, 1); });
    });
    std::this_thread::sleep_for(50ms);
    c1.abort("rank 1 failed: out of memory");
    const auto t0 = std::chrono::steady_clock::now();
    const auto msg = f.get();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    EXPECT_NE(msg.find("rank 1 failed: out of memory"), std::string::npos) << msg;
    EXPECT_TRUE(c0.aborted());
    float y = 0;
    EXPECT_NE(what_of([&] { c0.gather(0, &y, 1, nullptr); }).find("out of memory"),
              std::string::npos);
  }
  // Rank 0 aborts: the follower waiting for the sum throws.
  {
    auto m = connect_group(2);
    cpu::TcpComm c0(0, 2, m.zero.data, 30s), c1(1, 2, m.others[0].data, 30s);
    auto f = std::async(std::launch::async, [&] {
      float x = 1;
      return what_of([&] { c1.all_reduce_sum(1, &x, 1); });
    });
    std::this_thread::sleep_for(50ms);
    c0.abort("rank 0 failed: bad plan");
    EXPECT_NE(f.get().find("rank 0 failed: bad plan"), std::string::npos);
  }
  // A rank that never arrives: the collective times out with a message.
  {
    auto m = connect_group(2);
    cpu::TcpComm c0(0, 2, m.zero.data, 100ms), c1(1, 2, m.others[0].data, 100ms);
    float z = 0;
    const auto msg = what_of([&] { c0.all_reduce_sum(0, &z, 1); });
    EXPECT_NE(msg.find("rank 0 waited 100 ms for rank 1 in a all-reduce"), std::string::npos)
        << msg;
    EXPECT_TRUE(c0.aborted());
  }
  // A follower process that vanishes (its sockets close): rank 0 throws at once.
  {
    auto m = connect_group(2);
    cpu::TcpComm c0(0, 2, m.zero.data, 30s);
    auto f = std::async(std::launch::async, [&] {
      std::vector<float> x(8, 1.0f);
      return what_of([&] { c0.all_reduce_sum(0, x.data(), x.size()); });
    });
    std::this_thread::sleep_for(50ms);
    m.others.clear();  // closes rank 1's links
    const auto msg = f.get();
    EXPECT_NE(msg.find("rank 1 is gone"), std::string::npos) << msg;
  }
}

CpuBackendOptions opts() {
  CpuBackendOptions o;
  o.threads = 1;
  o.kv_bytes = 64ull << 20;
  return o;
}

// Rank 0 (local backend + proxy) and a follower thread running serve_tp_plans on its own
// rank backend over TCP: the teacher-forced logits equal the in-process TP=2 group's bit for
// bit (same shards, same rank-ordered sums), dense and snapkv; a bad plan fails the step on
// both ranks and the next one works; destroying rank 0's backends stops the follower (0).
TEST(TpProcess, ProxiedFollowerEqualsInProcessGroup) {
  auto w = test::tiny();
  const auto& c = w->config();
  auto m = connect_group(2);
  std::promise<int> follower_rc;
  std::thread follower([&] {
    auto comm = std::make_shared<cpu::TcpComm>(1, 2, m.others[0].data, 30s);
    auto b = make_cpu_tp_rank_backend(w, opts(), 1, comm);
    tp_send_ready(*m.others[0].control[0], *b);
    follower_rc.set_value(serve_tp_plans(*b, *m.others[0].control[0], 1));
  });
  auto remote = make_tp_group(make_cpu_tp_process_backends(m.zero, w, opts(), 30s));
  auto local = make_tp_group(make_cpu_tp_backends(w, opts(), 2));
  EXPECT_EQ(remote->info().num_pages, local->info().num_pages);
  const auto ids = test::tokens(70, c.vocab_size, 3);
  const SparsityProfile dense{}, snap = test::sparse_profile(Policy::kSnapKv, 1, 32, 8, 2);
  for (const auto* prof : {&dense, &snap}) {
    const auto got = teacher_forced_logits(*remote, ids, *prof, 40);
    const auto ref = teacher_forced_logits(*local, ids, *prof, 40);
    ASSERT_EQ(got.size(), ids.size() * static_cast<std::size_t>(c.vocab_size));
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * 4), 0)
        << (prof->enabled ? "snapkv" : "dense");
  }
  // A plan every rank refuses (page outside the pool): the step fails, the group survives.
  StepPlan bad;
  bad.step_id = 99;
  SeqStep s;
  s.seq_id = 1;
  s.tokens = {1, 2};
  s.prompt_len = 2;
  s.layers.resize(static_cast<std::size_t>(c.num_hidden_layers));
  for (auto& l : s.layers) l.pages = {remote->info().num_pages + 5};
  s.return_logits = true;
  bad.seqs.push_back(s);
  EXPECT_THROW(remote->step(bad), InternalError);
  const auto again = teacher_forced_logits(*remote, ids, dense, 40);
  EXPECT_EQ(again, teacher_forced_logits(*local, ids, dense, 40));

  remote.reset();  // the proxy sends the stop
  auto rc = follower_rc.get_future();
  ASSERT_EQ(rc.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(rc.get(), 0);
  follower.join();
}

// A follower whose rank backend cannot be built reports it; rank 0, whose own start-up is
// stuck or failed (the CUDA NCCL join waits for every rank), names the rank and the reason.
TEST(TpProcess, FollowerStartErrorIsNamedByRankZero) {
  auto m = connect_group(2);
  // Nothing waits on rank 0's side of the control link until the follower says something
  // (the CUDA join gives up when has_data() turns true).
  EXPECT_FALSE(m.zero.control[1]->has_data());
  auto rc = std::async(std::launch::async, [&] {
    return what_of([&] {
      run_tp_follower(m.others[0],
                      []() -> std::unique_ptr<Backend> { throw ConfigError("x", "no GPU 7"); });
    });
  });
  EXPECT_NE(rc.get().find("no GPU 7"), std::string::npos);
  for (int i = 0; i < 200 && !m.zero.control[1]->has_data(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(m.zero.control[1]->has_data());
  const auto msg = tp_remote_start_error(m.zero, 5s);
  EXPECT_NE(msg.find("rank 1 failed to start"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no GPU 7"), std::string::npos) << msg;
  EXPECT_EQ(tp_remote_start_error(m.zero, 100ms), "");  // nothing more was sent
  EXPECT_FALSE(m.zero.control[1]->has_data());
  m.others.clear();  // the follower's process is gone: its close is readable
  for (int i = 0; i < 200 && !m.zero.control[1]->has_data(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(m.zero.control[1]->has_data());
}

// A rank backend that fails every step without reaching its collectives (like a CUDA rank
// whose launch failed): only the follower's "group failed" reply can wake rank 0.
class FailingRank final : public Backend {
 public:
  explicit FailingRank(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  const BackendInfo& info() const override { return inner_->info(); }
  const ModelConfig& model() const override { return inner_->model(); }
  StepResult step(const StepPlan&) override { throw InternalError("device lost"); }

 private:
  std::unique_ptr<Backend> inner_;
};

// The follower's step fails and its communicator with it (group_failed): rank 0's proxy aborts
// rank 0's group at once, so rank 0's own collective stops waiting for rank 1 long before the
// 30 s collective timeout, with the follower's reason; the follower exits 1 when rank 0 goes.
TEST(TpProcess, FollowerReportingAFailedGroupAbortsRankZeroAtOnce) {
  auto w = test::tiny();
  auto m = connect_group(2);
  auto follower = std::async(std::launch::async, [&] {
    auto comm = std::make_shared<cpu::TcpComm>(1, 2, m.others[0].data, 30s);
    FailingRank b(make_cpu_tp_rank_backend(w, opts(), 1, comm));
    tp_send_ready(*m.others[0].control[0], b);
    return serve_tp_plans(b, *m.others[0].control[0], 1, [] { return true; });
  });
  auto comm = std::make_shared<cpu::TcpComm>(0, 2, m.zero.data, 30s);
  auto group = make_tp_group(make_tp_process_backends(
      m.zero, make_cpu_tp_rank_backend(w, opts(), 0, comm),
      [comm](const std::string& why) { comm->abort(why); }, [comm] { return comm->aborted(); }));
  const auto ids = test::tokens(10, w->config().vocab_size, 4);
  const auto t0 = std::chrono::steady_clock::now();
  const auto msg = what_of([&] { teacher_forced_logits(*group, ids, SparsityProfile{}); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_NE(msg.find("device lost"), std::string::npos) << msg;
  group.reset();
  comm.reset();
  m.zero = TpMesh{};  // rank 0's process is gone
  ASSERT_EQ(follower.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(follower.get(), 1);
}

// Rank 0 sends a plan, never joins the step's collectives and then says its group failed (the
// proxy's abort message on the control link): the watched follower (watch_tp_steps, as the
// CUDA follower runs) stops waiting in its collective at once with the watcher's reason, long
// before the 30 s collective timeout; it replies the error, skips the abort message between
// steps and exits 1 when rank 0 goes away.
TEST(TpProcess, WatchedFollowerStopsWaitingOnRankZerosAbort) {
  auto w = test::tiny();
  const auto& c = w->config();
  auto m = connect_group(2);
  auto comm = std::make_shared<cpu::TcpComm>(1, 2, m.others[0].data, 30s);
  auto b = watch_tp_steps(make_cpu_tp_rank_backend(w, opts(), 1, comm), *m.others[0].control[0],
                          [comm](const std::string& why) { comm->abort(why); });
  auto rc = std::async(std::launch::async,
                       [&] { return serve_tp_plans(*b, *m.others[0].control[0], 1); });
  test::PageAlloc pages(b->info().num_pages);
  test::Seq seq(1, test::tokens(20, c.vocab_size, 5),
                std::vector<LayerRule>(static_cast<std::size_t>(c.num_hidden_layers)));
  const auto t0 = std::chrono::steady_clock::now();
  m.zero.control[1]->send(TpMsg::kPlan, encode_plan(test::plan_of({seq.prefill(20, pages)})));
  std::this_thread::sleep_for(200ms);  // the follower waits in its first all-reduce
  m.zero.control[1]->send(TpMsg::kAbort, nullptr, 0);
  TpMessage reply;
  ASSERT_EQ(m.zero.control[1]->recv(reply, std::chrono::steady_clock::now() + 20s),
            TpLink::Recv::kOk);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  ASSERT_EQ(reply.type, TpMsg::kReply);
  const auto rep = decode_reply(reply.body.data(), reply.body.size());
  EXPECT_FALSE(rep.ok);
  EXPECT_NE(rep.error.find("rank 0 aborted the group or went away"), std::string::npos)
      << rep.error;
  m.zero = TpMesh{};  // rank 0's process is gone
  ASSERT_EQ(rc.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(rc.get(), 1);
}

// The follower's process goes away mid-group: rank 0's step fails with a message naming the
// rank instead of hanging.
TEST(TpProcess, VanishedFollowerFailsTheStep) {
  auto w = test::tiny();
  auto m = connect_group(2);
  {
    auto comm = std::make_shared<cpu::TcpComm>(1, 2, m.others[0].data, 30s);
    auto b = make_cpu_tp_rank_backend(w, opts(), 1, comm);
    tp_send_ready(*m.others[0].control[0], *b);
  }
  auto remote = make_tp_group(make_cpu_tp_process_backends(m.zero, w, opts(), 30s));
  m.others.clear();  // the follower's sockets close
  const auto ids = test::tokens(10, w->config().vocab_size, 4);
  const auto t0 = std::chrono::steady_clock::now();
  const auto msg = what_of([&] { teacher_forced_logits(*remote, ids, SparsityProfile{}); });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
  EXPECT_FALSE(msg.empty());
}

// Rank 0's process vanishes after sending a plan: the follower's collective fails at once and
// the follower loop returns 1 (exit code) instead of waiting for the timeout.
TEST(TpProcess, RankZeroVanishingMidStepEndsFollowerWithOne) {
  auto w = test::tiny();
  const auto& c = w->config();
  auto m = connect_group(2);
  auto comm = std::make_shared<cpu::TcpComm>(1, 2, m.others[0].data, 30s);
  auto b = make_cpu_tp_rank_backend(w, opts(), 1, comm);
  auto rc = std::async(std::launch::async,
                       [&] { return serve_tp_plans(*b, *m.others[0].control[0], 1); });
  test::PageAlloc pages(b->info().num_pages);
  test::Seq seq(1, test::tokens(20, c.vocab_size, 5),
                std::vector<LayerRule>(static_cast<std::size_t>(c.num_hidden_layers)));
  m.zero.control[1]->send(TpMsg::kPlan, encode_plan(test::plan_of({seq.prefill(20, pages)})));
  std::this_thread::sleep_for(100ms);  // the follower is waiting in its first all-reduce
  const auto t0 = std::chrono::steady_clock::now();
  m.zero = TpMesh{};  // rank 0's sockets close
  ASSERT_EQ(rc.wait_for(10s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_EQ(rc.get(), 1);
  EXPECT_TRUE(comm->aborted());
}

}  // namespace
}  // namespace strata
