// schedule_step (actors/scheduler.h) as a table: each scenario is a run of steps over one
// cache manager (one full-cache layer, 16-token pages), each row the step's input and the
// step, admissions, preemptions and rejections it must produce (TensorRT-LLM's capacity
// scheduler tests are the model).
#include "actors/scheduler.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

namespace strata::actors {
namespace {

struct Step {  // one PreparedSeq, as (id, prefill, start, n_tokens)
  std::uint64_t id;
  bool prefill;
  int start, n;
  bool operator==(const Step&) const = default;
};

struct Row {
  std::vector<std::uint64_t> commit, running;
  std::vector<Candidate> candidates;
  std::vector<Step> steps;
  std::vector<std::uint64_t> admitted, preempted, rejected;
};

struct Scenario {
  std::string name;
  int pages;
  SchedulerLimits limits;
  std::vector<Row> rows;
};

Candidate cand(std::uint64_t id, int prompt, int max_tokens = 4, bool chunked = true) {
  Candidate c;
  c.seq_id = id;
  c.spec.prompt_len = prompt;
  c.spec.max_tokens = max_tokens;
  c.spec.chunked = chunked;
  return c;
}

constexpr std::uint64_t A = 1, B = 2, C = 3, D = 4;
constexpr bool P = true, Dec = false;

std::vector<Scenario> scenarios() {
  return {
      {"a chunked prompt takes the token budget, the next candidate waits its turn",
       100,
       {4, 40, true},
       {
           {{}, {}, {cand(A, 50), cand(B, 10)}, {{A, P, 0, 40}}, {A}, {}, {}},
           // A's last 10 tokens, then B fits in the rest of the budget.
           {{A}, {A}, {cand(B, 10)}, {{A, P, 40, 10}, {B, P, 0, 10}}, {B}, {}, {}},
           {{A, B}, {A, B}, {}, {{A, Dec, 50, 1}, {B, Dec, 10, 1}}, {}, {}, {}},
       }},
      {"a decode that needs a page preempts the newest sequence, and nothing is admitted",
       4,
       {4, 64, true},
       {
           {{}, {}, {cand(A, 32), cand(B, 32)}, {{A, P, 0, 32}, {B, P, 0, 32}}, {A, B}, {}, {}},
           // A's token 32 starts a third page of A; the pool's four are all held.
           {{A, B}, {A, B}, {cand(C, 16)}, {{A, Dec, 32, 1}}, {}, {B}, {}},
       }},
      {"a request larger than the pool is rejected, the next one still admitted",
       4,
       {4, 256, true},
       {
           {{}, {}, {cand(C, 100), cand(D, 16)}, {{D, P, 0, 16}}, {D}, {}, {C}},
       }},
      {"max_num_seqs caps the running set",
       100,
       {1, 256, true},
       {
           {{}, {}, {cand(A, 8), cand(B, 8)}, {{A, P, 0, 8}}, {A}, {}, {}},
           {{A}, {A}, {cand(B, 8)}, {{A, Dec, 8, 1}}, {}, {}, {}},
       }},
      {"an unchunked prompt runs whole even past the budget, and alone",
       100,
       {4, 40, false},
       {
           {{}, {}, {cand(A, 50, 4, false), cand(B, 10, 4, false)}, {{A, P, 0, 50}}, {A}, {}, {}},
           {{A}, {A}, {cand(B, 10, 4, false)}, {{A, Dec, 50, 1}, {B, P, 0, 10}}, {B}, {}, {}},
       }},
  };
}

TEST(Scheduler, TableOfScenarios) {
  const KvLayout layout{2, 64, 2};
  for (const auto& sc : scenarios()) {
    KvCacheManager cache(1, layout, sc.pages, SparsityProfile{});
    for (std::size_t r = 0; r < sc.rows.size(); ++r) {
      const Row& row = sc.rows[r];
      SCOPED_TRACE(sc.name + ", step " + std::to_string(r + 1));
      ScheduleInput in;
      in.commit = row.commit;
      in.running = row.running;
      in.candidates = row.candidates;
      in.limits = sc.limits;
      const auto out = schedule_step(cache, in);
      std::vector<Step> steps;
      for (const auto& s : out.steps) {
        steps.push_back({s.seq_id, s.prefill, s.start, s.n_tokens});
        EXPECT_EQ(s.layers.size(), 1u);  // one table per layer
      }
      EXPECT_EQ(steps, row.steps);
      EXPECT_EQ(out.admitted, row.admitted);
      EXPECT_EQ(out.preempted, row.preempted);
      std::vector<std::uint64_t> rejected;
      for (const auto& [id, why] : out.rejected) {
        rejected.push_back(id);
        EXPECT_NE(why.find("more than the whole pool"), std::string::npos) << why;
      }
      EXPECT_EQ(rejected, row.rejected);
      cache.check_invariants();
    }
  }
}

// The guardrail's replays (full-cache sequences with no client) at the lowest priority.
Candidate replay(std::uint64_t id, int prompt) {
  Candidate c = cand(id, prompt, 1);
  c.spec.sparsity = SparsityProfile{};
  return c;
}

std::vector<Step> steps_of(const ScheduleOutput& out) {
  std::vector<Step> v;
  for (const auto& s : out.steps) v.push_back({s.seq_id, s.prefill, s.start, s.n_tokens});
  return v;
}

constexpr std::uint64_t R = 9;

TEST(Scheduler, ReplaysTakeOnlyWhatServedWorkLeavesInChunks) {
  const KvLayout layout{2, 64, 2};
  KvCacheManager cache(1, layout, 100, SparsityProfile{});
  ScheduleInput in;
  in.limits = {4, 40, true};
  in.candidates = {cand(A, 30)};
  in.replays.candidates = {replay(R, 600)};
  in.replays.served_queued = 2;  // A and one more the batcher did not pass: R waits
  auto out = schedule_step(cache, in);
  EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, P, 0, 30}}));
  EXPECT_TRUE(out.replays.admitted.empty());

  ScheduleInput in2;
  in2.limits = {4, 300, true};
  in2.commit = {A};
  in2.running = {A};
  in2.replays.candidates = {replay(R, 600)};
  in2.replays.chunk = 256;
  out = schedule_step(cache, in2);  // nothing served waits: R gets the rest, at most 256
  EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, Dec, 30, 1}, {R, P, 0, 256}}));
  EXPECT_EQ(out.replays.admitted, (std::vector<std::uint64_t>{R}));
  ScheduleInput in3;
  in3.limits = {4, 100, true};
  in3.commit = {A, R};
  in3.running = {A};
  in3.replays.running = {R};
  out = schedule_step(cache, in3);
  EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, Dec, 31, 1}, {R, P, 256, 99}}));
  cache.check_invariants();
}

TEST(Scheduler, ReplaysNeverShareAStepWithAServedPrefill) {
  // A replay's chunk would lengthen the step of a served prefill chunk and so that request's
  // time to first token: such a step carries no replay tokens, running or newly admitted.
  const KvLayout layout{2, 64, 2};
  KvCacheManager cache(1, layout, 100, SparsityProfile{});
  ScheduleInput in;
  in.limits = {4, 300, true};
  in.replays.candidates = {replay(R, 600)};
  auto out = schedule_step(cache, in);
  EXPECT_EQ(steps_of(out), (std::vector<Step>{{R, P, 0, 256}}));

  ScheduleInput in2;  // a served request arrives: its prefill runs alone
  in2.limits = in.limits;
  in2.commit = {R};
  in2.candidates = {cand(A, 100)};
  in2.replays.running = {R};
  in2.replays.served_queued = 1;
  out = schedule_step(cache, in2);
  EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, P, 0, 100}}));
  EXPECT_EQ(out.admitted, (std::vector<std::uint64_t>{A}));
  EXPECT_TRUE(out.replays.preempted.empty());  // it keeps its pages and waits

  ScheduleInput in3;  // a decode beside a new prefill's first chunk: no replay
  in3.limits = {4, 40, true};
  in3.commit = {A};
  in3.running = {A};
  in3.candidates = {cand(B, 120)};
  in3.replays.running = {R};
  in3.replays.served_queued = 1;
  out = schedule_step(cache, in3);
  EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, Dec, 100, 1}, {B, P, 0, 39}}));

  ScheduleInput in4;  // the rest of B's prompt, a running prefill: still no replay
  in4.limits = {4, 300, true};
  in4.commit = {A, B};
  in4.running = {A, B};
  in4.replays.running = {R};
  out = schedule_step(cache, in4);
  EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, Dec, 101, 1}, {B, P, 39, 81}}));

  ScheduleInput in5;  // decodes only: the replay goes on where it stopped
  in5.limits = {4, 300, true};
  in5.commit = {A, B};
  in5.running = {A, B};
  in5.replays.running = {R};
  out = schedule_step(cache, in5);
  EXPECT_EQ(steps_of(out),
            (std::vector<Step>{{A, Dec, 102, 1}, {B, Dec, 120, 1}, {R, P, 256, 256}}));
  cache.check_invariants();
}

TEST(Scheduler, ReplaysArePreemptedBeforeAnyServedSequence) {
  const KvLayout layout{2, 64, 2};
  {
    // A decode that needs a page takes it from the replay, not from a served sequence.
    KvCacheManager cache(1, layout, 5, SparsityProfile{});
    ScheduleInput in;
    in.limits = {4, 64, true};
    in.candidates = {cand(A, 31)};
    auto out = schedule_step(cache, in);
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, P, 0, 31}}));
    ScheduleInput in1;
    in1.limits = in.limits;
    in1.commit = {A};
    in1.running = {A};
    in1.replays.candidates = {replay(R, 48)};
    in1.replays.chunk = 16;
    out = schedule_step(cache, in1);  // A's token 31 stays in its second page
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, Dec, 31, 1}, {R, P, 0, 16}}));
    ScheduleInput in2;
    in2.limits = in.limits;
    in2.commit = {A, R};
    in2.running = {A};
    in2.replays.running = {R};
    in2.replays.chunk = 16;
    out = schedule_step(cache, in2);  // A's token 32 opens a third page: the pool is full
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, Dec, 32, 1}}));
    EXPECT_EQ(out.replays.preempted, (std::vector<std::uint64_t>{R}));
    EXPECT_TRUE(out.preempted.empty());
    EXPECT_FALSE(cache.contains(R));
    cache.check_invariants();
  }
  {
    // A served candidate that does not fit beside the replay gets its pages.
    KvCacheManager cache(1, layout, 5, SparsityProfile{});
    ScheduleInput in;
    in.limits = {4, 64, true};
    in.replays.candidates = {replay(R, 48)};
    in.replays.chunk = 16;
    auto out = schedule_step(cache, in);
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{R, P, 0, 16}}));
    ScheduleInput in2;
    in2.limits = in.limits;
    in2.commit = {R};
    in2.candidates = {cand(B, 48)};
    in2.replays.running = {R};
    in2.replays.served_queued = 1;
    in2.replays.chunk = 16;
    out = schedule_step(cache, in2);
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{B, P, 0, 48}}));
    EXPECT_EQ(out.admitted, (std::vector<std::uint64_t>{B}));
    EXPECT_EQ(out.replays.preempted, (std::vector<std::uint64_t>{R}));
    cache.check_invariants();
  }
  {
    // ... and a seat: a replay never holds one a served request wants.
    KvCacheManager cache(1, layout, 100, SparsityProfile{});
    ScheduleInput in;
    in.limits = {1, 64, true};
    in.replays.candidates = {replay(R, 48)};
    schedule_step(cache, in);
    ScheduleInput in2;
    in2.limits = in.limits;
    in2.commit = {R};
    in2.candidates = {cand(B, 8)};
    in2.replays.running = {R};
    in2.replays.served_queued = 1;
    const auto out = schedule_step(cache, in2);
    EXPECT_EQ(out.admitted, (std::vector<std::uint64_t>{B}));
    EXPECT_EQ(out.replays.preempted, (std::vector<std::uint64_t>{R}));
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{B, P, 0, 8}}));
  }
  {
    // A replay larger than the pool is given up, never waited for.
    KvCacheManager cache(1, layout, 4, SparsityProfile{});
    ScheduleInput in;
    in.limits = {4, 64, true};
    in.replays.candidates = {replay(R, 100)};
    const auto out = schedule_step(cache, in);
    EXPECT_EQ(out.replays.rejected, (std::vector<std::uint64_t>{R}));
    EXPECT_TRUE(out.steps.empty());
  }
}

TEST(Scheduler, AReplayStarvedBySustainedServedPrefillsIsReleasedInBoundedSteps) {
  // Every step carries a served prefill (a new request's whole prompt): the admitted replay
  // gets no chunk. After max_stalled such calls it is preempted (seat and pages back, reported
  // as a preempted replay), never held indefinitely. A step that gives it a chunk resets the
  // count.
  const KvLayout layout{2, 64, 2};
  KvCacheManager cache(1, layout, 400, SparsityProfile{});
  ScheduleInput in;
  in.limits = {8, 300, true};
  in.replays.candidates = {replay(R, 600)};
  auto out = schedule_step(cache, in);
  ASSERT_EQ(steps_of(out), (std::vector<Step>{{R, P, 0, 256}}));
  ASSERT_EQ(out.replays.admitted, (std::vector<std::uint64_t>{R}));
  EXPECT_EQ(out.replays.stalled, (std::vector<std::pair<std::uint64_t, int>>{{R, 0}}));
  {
    ScheduleInput s;  // no budget left for it: a stall
    s.limits = {8, 20, true};
    s.commit = {R};
    s.candidates = {cand(A, 20, 1)};
    s.replays.running = {R};
    s.replays.stalled = {3};
    out = schedule_step(cache, s);
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{A, P, 0, 20}}));
    EXPECT_EQ(out.replays.stalled, (std::vector<std::pair<std::uint64_t, int>>{{R, 4}}));
    ScheduleInput s2;  // A is released, nothing served runs: R's next chunk, the count resets
    s2.limits = in.limits;
    s2.commit = {A};
    s2.release = {A};
    s2.replays.running = {R};
    s2.replays.stalled = {4};
    out = schedule_step(cache, s2);
    EXPECT_EQ(steps_of(out), (std::vector<Step>{{R, P, 256, 256}}));
    EXPECT_EQ(out.replays.stalled, (std::vector<std::pair<std::uint64_t, int>>{{R, 0}}));
  }
  std::vector<std::uint64_t> running, commit = {R}, release;
  int stalled = 0;
  const int max_stalled = 5;
  int released_at = -1;
  for (int step = 0; step < 50 && released_at < 0; ++step) {
    ScheduleInput s;
    s.limits = in.limits;
    s.commit = commit;
    s.release = release;
    s.running = running;
    const std::uint64_t id = 100 + static_cast<std::uint64_t>(step);
    s.candidates = {cand(id, 40, 2)};  // a new short request every step: its whole prompt
    s.replays.running = {R};
    s.replays.stalled = {stalled};
    s.replays.max_stalled = max_stalled;
    out = schedule_step(cache, s);
    ASSERT_EQ(out.admitted, (std::vector<std::uint64_t>{id}));
    for (const auto& st : out.steps) ASSERT_NE(st.seq_id, R) << "step " << step;
    if (!out.replays.preempted.empty()) {
      EXPECT_EQ(out.replays.preempted, (std::vector<std::uint64_t>{R}));
      EXPECT_TRUE(out.replays.stalled.empty());
      released_at = step;
      break;
    }
    ASSERT_EQ(out.replays.stalled.size(), 1u);
    EXPECT_EQ(out.replays.stalled[0].second, stalled + 1);
    stalled = out.replays.stalled[0].second;
    // Served requests end after one decode (max_tokens 2): released at the next call.
    commit.clear();
    release.clear();
    running.clear();
    for (const auto& st : out.steps) {
      commit.push_back(st.seq_id);
      (st.prefill ? running : release).push_back(st.seq_id);
    }
  }
  EXPECT_EQ(released_at, max_stalled - 1);  // the max_stalled-th call without a chunk
  EXPECT_FALSE(cache.contains(R));
  cache.check_invariants();
}

}  // namespace
}  // namespace strata::actors
