// The live quality guardrail's arithmetic (docs/sparsity.md "Quality guardrail"), pure: what
// a sampled sequence's sparse run recorded, how one full-cache replay row is scored against
// it, and the per (profile version, prompt-length bucket) aggregates with their intervals.
// The batcher (actors/replay_queue.h) schedules the replays; the QualityMonitor actor
// (actors/quality_monitor.h) scores their rows and publishes a QualityReport.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/sampling_params.h"

namespace strata {

// Prompt-length buckets (request classes), by prompt tokens: "0-255", "256-1023",
// "1024-4095", "4096-16383", "16384+".
const char* quality_bucket(int prompt_len);
const std::vector<std::string>& quality_buckets();  // in that order

// What the sparse (served) run of one finished sequence recorded.
struct ReplayRecord {
  std::uint64_t profile_version = 0;  // the version it was admitted with
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> output;   // the emitted continuation, n >= 1 tokens
  std::vector<std::int32_t> argmax;   // [n] the sparse run's argmax at each output position
  std::vector<float> logprob;         // [n] the sparse run's logprob of each output token
  SamplingParams params;              // its penalties/bias shape the row both runs score
  std::vector<std::int32_t> eos_ids;  // banned while min_tokens is not reached (empty: ignore_eos)
  // The replay's input: prompt + output[0, n-1); position P-1+k predicts output[k].
  std::vector<std::int32_t> replay_tokens() const;
  int first_scored() const { return static_cast<int>(prompt.size()) - 1; }
};

// One replay's comparison, position by position.
struct ReplayScore {
  int positions = 0;                  // output positions scored (in order: 0 .. positions-1)
  int agree = 0;                      // of which full-cache argmax == sparse argmax
  double delta_sum = 0.0;             // sum of (full - sparse) logprob of the emitted token
  double delta_sq = 0.0;              // sum of squares (position-level spread)
  std::vector<std::int32_t> history;  // output[0, positions): the penalties' history
  bool done(const ReplayRecord& r) const { return positions == static_cast<int>(r.output.size()); }
};

// Scores full-cache logits rows [rows][vocab] of positions first_pos, first_pos+1, ...:
// only the next unscored output position counts (rows before it are skipped, rows past the
// last output position ignored). `logits` is modified (the sampler's row processing).
void score_replay_rows(const ReplayRecord& rec, int first_pos, std::span<float> logits, int vocab,
                       ReplayScore& score);

struct Interval {
  double lo = 0.0, hi = 0.0;
};
// 95 % Wilson score interval of k successes in n trials ([0, 1] when n = 0).
Interval wilson_interval(double k, double n, double z = 1.96);

// The aggregate of one (profile version, prompt bucket): the samples' positions pooled.
struct QualityCell {
  std::uint64_t version = 0;
  std::string bucket;
  std::uint64_t samples = 0, positions = 0, agree = 0;
  double delta_sum = 0.0, delta_sq = 0.0;
  // Per-sample sums for the cluster (per-request) intervals: positions of one request are not
  // independent, requests are. a: agreements, d: delta sum, n: positions of each sample.
  double s_aa = 0, s_an = 0, s_nn = 0, s_dd = 0, s_dn = 0;

  void add(const ReplayScore& s);
  void merge(const QualityCell& o);  // same version (any bucket): the version's total
  double agreement() const;          // agree / positions (1 when none)
  double delta_mean() const;         // delta_sum / positions (0 when none)
  // 95 %: the union of the Wilson interval over positions and the normal interval of the
  // ratio estimator over samples (from 2 samples on), clipped to [0, 1].
  Interval agreement_interval() const;
  // 95 % normal interval of the per-token mean: over samples from 2 on, else over positions.
  Interval delta_interval() const;
};

struct QualityAlert {
  std::uint64_t version = 0;
  double agreement = 0.0, upper = 0.0;  // the version's agreement and its interval's top
  std::uint64_t samples = 0;
  bool restore_requested = false;  // restore_on_alert: the previous profile was asked back
};

// What /metrics and the admin API show. Cells sorted by version, then bucket order.
struct QualityReport {
  double sample_rate = 0.0, alert_below = 0.0;
  int alert_min_samples = 0;
  std::vector<QualityCell> cells;
  std::vector<QualityAlert> alerts;  // one per version that alerted, in order
  std::uint64_t replays_completed = 0;
  std::uint64_t replays_incomplete = 0;  // ended with positions unscored (a bug if ever > 0)
  // One version's total over the buckets.
  QualityCell version_total(std::uint64_t version) const;
  std::vector<std::uint64_t> versions() const;  // ascending
};

// Adds one finished replay to `report` (its cell created when new).
void add_replay(QualityReport& report, const ReplayRecord& rec, const ReplayScore& score);
// Whether `version`'s total trips the alert: alert_below > 0, samples >= alert_min_samples and
// the agreement interval's top below alert_below.
bool alert_tripped(const QualityReport& report, std::uint64_t version);

}  // namespace strata
