// The engine's statistics: the EngineStats snapshot the admin actor publishes after every
// scheduling call (Engine::stats(), /metrics, the admin console) and the step loop's timings.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "actors/quality.h"
#include "cache/layer_census.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata {

// A Prometheus-style histogram: per-bucket counts (not cumulative), sum and count.
class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(std::vector<double> upper_bounds)
      : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}
  void observe(double v) {
    if (std::isnan(v)) return;
    std::size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
  }
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<std::uint64_t>& counts() const { return counts_; }  // last: +Inf
  double sum() const { return sum_; }
  std::uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // bounds_.size() + 1
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

// Bounds (s) of the inter-token latency histogram (vLLM's vllm:inter_token_latency_seconds).
inline std::vector<double> inter_token_latency_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}

// Where the step loop's wall time goes, cumulative since start (ms; rank 0's view). A step
// runs schedule -> plan -> dispatch -> backend -> return -> finish; the host overhead is
// everything but device_ms (docs/actors.md "Host overhead").
struct StepTimings {
  std::uint64_t steps = 0;       // steps counted below
  double schedule_ms = 0.0;      // batcher -> cache actor -> batcher: commit, release, schedule
  double schedule_job_ms = 0.0;  // of which the job on the cache strand (page tables included)
  double plan_ms = 0.0;      // bookkeeping of the schedule, stats publication, StepPlan assembly
  double dispatch_ms = 0.0;  // plan handed to the rank executors -> Backend::step starts
  double backend_ms = 0.0;   // Backend::step wall time (device and the backend's host work)
  double device_ms = 0.0;    // StepStats::device_ms
  double return_ms = 0.0;    // Backend::step returned -> the batcher handles the completion
  double finish_ms = 0.0;    // tokens appended, detokenized, stops checked, events streamed
  double wall_ms = 0.0;      // schedule start -> completion handled
  // Time with at least one step in flight: the union of the steps' [schedule start, completion
  // handled] intervals (InflightTime). The same as wall_ms with the synchronous loop; less with
  // the pipelined one, whose step n + 1 starts before step n's completion is handled (the walls
  // overlap, and their sum counts that time twice). host_overhead is 1 - device_ms / inflight_ms.
  double inflight_ms = 0.0;
};

// The union of intervals fed in order of their ends, each starting no earlier than the previous
// one started (the step loop's steps start and complete in order): StepTimings::inflight_ms.
class InflightTime {
 public:
  // [start_ms, end_ms] on one clock (ms since any fixed epoch), end_ms >= start_ms.
  void add(double start_ms, double end_ms) {
    const double from = std::max(start_ms, last_end_);
    if (end_ms > from) total_ += end_ms - from;
    last_end_ = std::max(last_end_, end_ms);
  }
  double total() const { return total_; }

 private:
  double total_ = 0.0, last_end_ = -std::numeric_limits<double>::infinity();
};

struct EngineStats {
  int running = 0, waiting = 0, preempted = 0;
  std::uint64_t steps = 0, preemptions = 0;
  std::uint64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  std::uint64_t requests_finished = 0, requests_refused = 0, requests_aborted = 0;
  int pages_total = 0, pages_used = 0;
  std::vector<int> pages_per_layer;  // pages held per layer
  double kv_usage = 0.0;             // pages_used / pages_total
  // Prefix cache: pages held by cached blocks, shared with sequences or not. pages_used leaves out
  // those only the cache references - all of an unused block's and the sparse-layer copies of a
  // block whose users have selected (table-only pages): they count as free memory and are
  // reclaimed under pressure (docs/sparsity.md "Prefix cache"). Prompt tokens looked up at
  // admission and found there (vLLM's prefix_cache_queries / prefix_cache_hits).
  int pages_cached = 0;
  std::uint64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  double compression_ratio = 1.0;  // global: full-cache bytes / bytes held (running sequences)
  double mean_batch = 0.0;         // mean sequences per step since start
  // Share of the time a step was in flight (StepTimings::inflight_ms) not covered by device work.
  double host_overhead = 0.0;
  // GPU idle between steps on the device timeline (issue 24: the host-overhead ratio means
  // nothing once the host runs ahead): gaps / (gaps + device time) since start, over steps that
  // followed a step with sequences still running. gpu_idle_steps == 0: not measured (the CPU
  // backend reports no gaps), the metric is not exported.
  double gpu_idle_ratio = 0.0;
  std::uint64_t gpu_idle_steps = 0;
  double gpu_idle_ms = 0.0, gpu_busy_ms = 0.0;  // the ratio's two sums (ms since start)
  // Page-table bytes copied host -> device since start (StepStats::table_bytes: the resident
  // tables' deltas or whole tables), over table_steps steps; table_steps == 0: not measured.
  std::uint64_t table_bytes = 0, table_steps = 0;
  // Completed steps by how they ran (index: SyncReason; [kNone]: pipelined; docs/actors.md
  // "Sync steps"): the pipelined loop's steps that a backend ran synchronously after the steps
  // in flight, by reason, or every step as kSyncLoop with scheduler.async_steps off. And the
  // GPU idle (gpu_idle_ms) by the synchronous step it sat next to: the gap before one (the
  // drain) or right after one (the refill) counts for its reason, every other gap for kNone.
  std::array<std::uint64_t, kSyncReasons> sync_steps{};
  std::array<double, kSyncReasons> gpu_idle_ms_by_sync{};
  // Completed steps by kind: decode rows only, prefill chunks only (replays included), both.
  std::uint64_t steps_decode = 0, steps_prefill = 0, steps_mixed = 0;
  std::uint64_t profile_version = 0;
  SparsityProfile profile;
  // K+V bytes of one page (one layer, 16 slots, the rank's KV heads).
  std::size_t page_bytes = 0;
  // The latest per-layer census (cache/layer_census.h), taken about every 250 ms while
  // sequences run; null before the first. Shared: a snapshot copy does not copy it.
  std::shared_ptr<const std::vector<LayerUsage>> layers;
  StepTimings timings;
  // The quality guardrail (docs/sparsity.md "Quality guardrail"). Replays are not requests:
  // they are in no request counter, in neither `preemptions` nor `running`; steps counts the
  // steps they ran in.
  struct Replays {
    std::uint64_t sampled = 0;    // finished sequences chosen for a replay
    std::uint64_t dropped = 0;    // of which never replayed (queue full, never fits, failed)
    std::uint64_t finished = 0;   // replays whose every position was computed
    std::uint64_t preempted = 0;  // replay preemptions (they go first)
    std::uint64_t steps = 0, tokens = 0;  // replay chunks run and their tokens
  } replays;
  // The monitor's latest report (Engine::stats() attaches it; null when the monitor is off).
  std::shared_ptr<const QualityReport> quality;
  // Every interval between two consecutive tokens of one sequence (s), observed by the batcher
  // as the step that sampled the later token completes (preemption gaps included).
  Histogram inter_token_latency_s{inter_token_latency_buckets()};
};

}  // namespace strata
