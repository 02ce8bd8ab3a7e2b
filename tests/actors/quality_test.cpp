// The guardrail's arithmetic (actors/quality.h) and the batcher's replay queue
// (actors/replay_queue.h), without an engine.
#include "actors/quality.h"

#include <gtest/gtest.h>

#include <cmath>

#include "actors/replay_queue.h"

namespace strata {
namespace {

TEST(Quality, PromptBucketsAreRequestClasses) {
  EXPECT_STREQ(quality_bucket(1), "0-255");
  EXPECT_STREQ(quality_bucket(255), "0-255");
  EXPECT_STREQ(quality_bucket(256), "256-1023");
  EXPECT_STREQ(quality_bucket(4000), "1024-4095");
  EXPECT_STREQ(quality_bucket(4096), "4096-16383");
  EXPECT_STREQ(quality_bucket(100000), "16384+");
  EXPECT_EQ(quality_buckets().size(), 5u);
}

// A record over a 4-token vocabulary: prompt {1, 2}, output {3, 0, 2}; the sparse run's argmax
// {3, 1, 2} and logprobs {-0.5, -2, -1}.
ReplayRecord record() {
  ReplayRecord r;
  r.profile_version = 7;
  r.prompt = {1, 2};
  r.output = {3, 0, 2};
  r.argmax = {3, 1, 2};
  r.logprob = {-0.5f, -2.0f, -1.0f};
  r.params.temperature = 0;
  return r;
}

double log_softmax(const std::vector<float>& row, int t) {
  double m = row[0], z = 0;
  for (float x : row) m = std::max(m, static_cast<double>(x));
  for (float x : row) z += std::exp(x - m);
  return row[static_cast<std::size_t>(t)] - m - std::log(z);
}

TEST(Quality, ReplayRowsAreScoredInOrderFromTheLastPromptPosition) {
  const ReplayRecord rec = record();
  EXPECT_EQ(rec.replay_tokens(), (std::vector<std::int32_t>{1, 2, 3, 0}));
  EXPECT_EQ(rec.first_scored(), 1);  // position 1 (after the prompt) predicts output[0]
  // Full-cache rows of positions 0..3; row 0 (a prompt position) is not scored.
  const std::vector<std::vector<float>> rows = {
      {9, 0, 0, 0}, {0, 0, 0, 2}, {0, 0, 3, 1}, {0, 0, 4, 0}};
  std::vector<float> chunk1, chunk2;
  for (int r = 0; r < 2; ++r) chunk1.insert(chunk1.end(), rows[r].begin(), rows[r].end());
  for (int r = 1; r < 4; ++r) chunk2.insert(chunk2.end(), rows[r].begin(), rows[r].end());
  ReplayScore s;
  score_replay_rows(rec, 0, chunk1, 4, s);  // positions 0, 1: output[0] scored
  EXPECT_EQ(s.positions, 1);
  // A chunk that repeats a scored position (a replay recomputed after a preemption) skips it.
  score_replay_rows(rec, 1, chunk2, 4, s);
  EXPECT_EQ(s.positions, 3);
  EXPECT_TRUE(s.done(rec));
  // Full argmax {3, 2, 2} against the sparse {3, 1, 2}: two of three agree.
  EXPECT_EQ(s.agree, 2);
  const double d = (log_softmax(rows[1], 3) + 0.5) + (log_softmax(rows[2], 0) + 2.0) +
                   (log_softmax(rows[3], 2) + 1.0);
  EXPECT_NEAR(s.delta_sum, d, 1e-9);
  EXPECT_EQ(s.history, rec.output);
}

TEST(Quality, WilsonIntervalHandValues) {
  // 10 of 10: [0.7225, 1]; 5 of 10: symmetric around 0.5.
  const Interval a = wilson_interval(10, 10);
  EXPECT_NEAR(a.lo, 0.7225, 1e-4);
  EXPECT_DOUBLE_EQ(a.hi, 1.0);
  const Interval b = wilson_interval(5, 10);
  EXPECT_NEAR(b.lo + b.hi, 1.0, 1e-12);
  EXPECT_NEAR(b.lo, 0.2366, 1e-4);
  const Interval none = wilson_interval(0, 0);
  EXPECT_EQ(none.lo, 0.0);
  EXPECT_EQ(none.hi, 1.0);
}

TEST(Quality, CellsPoolPositionsAndIntervalsCountRequests) {
  QualityCell c;
  ReplayScore a, b;
  a.positions = 10, a.agree = 10, a.delta_sum = 0.0;
  b.positions = 10, b.agree = 0, b.delta_sum = -10.0, b.delta_sq = 10.0;
  c.add(a);
  EXPECT_EQ(c.agreement(), 1.0);
  EXPECT_NEAR(c.agreement_interval().lo, 0.7225, 1e-4);  // one sample: Wilson
  c.add(b);
  EXPECT_EQ(c.samples, 2u);
  EXPECT_EQ(c.positions, 20u);
  EXPECT_DOUBLE_EQ(c.agreement(), 0.5);
  EXPECT_DOUBLE_EQ(c.delta_mean(), -0.5);
  // Two requests that disagree wholly: the per-request interval is far wider than Wilson's
  // over 20 positions (which would pretend 20 independent trials).
  const Interval w = wilson_interval(10, 20);
  const Interval ci = c.agreement_interval();
  EXPECT_LT(ci.lo, w.lo);
  EXPECT_GT(ci.hi, w.hi);
  EXPECT_EQ(ci.lo, 0.0);  // 0.5 +- 1.96 * 0.5, clipped
  EXPECT_EQ(ci.hi, 1.0);
  const Interval d = c.delta_interval();
  EXPECT_LT(d.lo, -0.5);
  EXPECT_GT(d.hi, -0.5);
  EXPECT_NEAR(d.hi - d.lo, 2 * 1.96 * 0.5, 1e-9);  // se = sqrt(2 * 50) / 20
}

TEST(Quality, ReportKeepsAVersionPerLineAndAlertsOnItsInterval) {
  QualityReport r;
  r.alert_below = 0.9;
  r.alert_min_samples = 3;
  ReplayRecord rec = record();
  ReplayScore bad;
  bad.positions = 20, bad.agree = 10;
  for (int i = 0; i < 3; ++i) add_replay(r, rec, bad);
  rec.profile_version = 3;
  rec.prompt.assign(300, 1);
  ReplayScore good;
  good.positions = 20, good.agree = 20;
  add_replay(r, rec, good);
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_EQ(r.cells[0].version, 3u);  // sorted by version
  EXPECT_EQ(r.cells[0].bucket, "256-1023");
  EXPECT_EQ(r.versions(), (std::vector<std::uint64_t>{3, 7}));
  EXPECT_EQ(r.replays_completed, 4u);
  EXPECT_TRUE(alert_tripped(r, 7));
  EXPECT_FALSE(alert_tripped(r, 3));  // one sample, and it agrees
  r.alert_min_samples = 4;
  EXPECT_FALSE(alert_tripped(r, 7));  // not enough samples yet
  r.alert_below = 0;
  r.alert_min_samples = 1;
  EXPECT_FALSE(alert_tripped(r, 7));  // no threshold
}

TEST(ReplayQueue, SamplesExactlyTheRateAndBoundsTheQueue) {
  actors::ReplayQueue q(0.25, 2);
  int sampled = 0;
  for (int i = 0; i < 40; ++i) sampled += q.sample();
  EXPECT_EQ(sampled, 10);
  actors::ReplayQueue off(0.0, 2);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(off.sample());
  actors::ReplayQueue all(1.0, 2);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(all.sample());

  auto rec = std::make_shared<const ReplayRecord>(record());
  EXPECT_TRUE(q.push(1, rec));
  EXPECT_TRUE(q.push(2, rec));
  EXPECT_FALSE(q.push(3, rec));  // max_pending
  // One replay at a time: the first is the candidate, with the full cache.
  auto c = q.candidates();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].seq_id, 1u);
  EXPECT_EQ(c[0].spec.prompt_len, 4);
  ASSERT_TRUE(c[0].spec.sparsity.has_value());
  EXPECT_FALSE(c[0].spec.sparsity->enabled);
  EXPECT_FALSE(c[0].spec.block_hashes);  // outside the prefix cache
  q.admitted(1);
  EXPECT_TRUE(q.candidates().empty());
  EXPECT_EQ(q.running(), (std::vector<std::uint64_t>{1}));

  // Chunk [0, 2) asks for logits (it holds position 1, the first scored).
  actors::PreparedSeq p{1, true, 0, 2, {}, 0};
  SeqStep st;
  st.report_kept = true;  // (a recycled step: every field is reassigned)
  q.fill(st, p);
  EXPECT_EQ(st.tokens, (std::vector<std::int32_t>{1, 2}));
  EXPECT_TRUE(st.prefill);
  EXPECT_FALSE(st.sample);
  EXPECT_TRUE(st.return_logits);
  EXPECT_FALSE(st.report_kept);
  EXPECT_EQ(st.prompt_len, 4);
  auto done = q.completed(st, std::vector<float>(8, 0.0f));
  ASSERT_TRUE(done.rows);
  EXPECT_EQ(done.rows->first_pos, 0);
  EXPECT_FALSE(done.rows->last);
  EXPECT_FALSE(done.finished);

  // Preempted: first in line again; recomputed from 0, the chunk [0, 2) asks for nothing.
  q.preempted(1);
  EXPECT_EQ(q.candidates()[0].seq_id, 1u);
  q.admitted(1);
  q.fill(st, p);
  EXPECT_FALSE(st.return_logits);
  EXPECT_FALSE(q.completed(st, {}).rows);
  actors::PreparedSeq rest{1, true, 2, 2, {}, 0};
  q.fill(st, rest);
  EXPECT_TRUE(st.return_logits);
  done = q.completed(st, std::vector<float>(8, 0.0f));
  ASSERT_TRUE(done.rows);
  EXPECT_TRUE(done.rows->last);
  EXPECT_TRUE(done.finished);
  EXPECT_FALSE(q.owns(1));
  EXPECT_EQ(q.candidates()[0].seq_id, 2u);
  EXPECT_TRUE(q.clear().empty());  // 2 was waiting: the cache holds nothing of it
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace strata
