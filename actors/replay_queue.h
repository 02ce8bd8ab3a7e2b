// The batcher's side of the quality guardrail (docs/actors.md "Quality guardrail"): which
// finished sequences are sampled, the replays waiting and running, the StepPlan entries of
// their chunks and the rows each completed chunk sends to the QualityMonitor. A replay is a
// sequence of the cache manager with the full-cache profile (sparsity off), prompt = the
// served prompt + the tokens the sparse run emitted (but the last), prefilled in chunks of at
// most 256 tokens at the lowest priority (actors/scheduler.h), never sampling; it has no
// client, no waiting slot (it can never cause a 429) and no stream.
//
// Threading: the batcher's strand only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "actors/quality.h"
#include "actors/quality_monitor.h"
#include "actors/scheduler.h"
#include "runtime/step_plan.h"

namespace strata::actors {

class ReplayQueue {
 public:
  ReplayQueue(double sample_rate, int max_pending) : rate_(sample_rate), max_(max_pending) {}

  // One finished sequence eligible for a replay: is it sampled? Deterministic: of the first k
  // eligible sequences, exactly floor(k * sample_rate) are (0: none).
  bool sample();
  // Queues a replay of `rec` under sequence id `id`; false when max_pending replays are
  // queued already (the sample is dropped).
  bool push(std::uint64_t id, std::shared_ptr<const ReplayRecord> rec);
  // Is `id` a running replay (one the cache manager holds, which steps can carry)? O(running):
  // the batcher asks for every sequence of every step.
  bool owns(std::uint64_t id) const;
  bool empty() const { return q_.empty(); }

  // Scheduler inputs: the running replays, and the next waiting one when none runs (one
  // replay at a time: the guardrail is a sample, not a workload).
  std::vector<std::uint64_t> running() const;
  // Per running() entry: consecutive scheduling calls it got no chunk in (ReplayInput::stalled).
  std::vector<int> stalled() const;
  std::vector<Candidate> candidates() const;
  void admitted(std::uint64_t id);
  // A scheduling call's stall count of a running replay (ReplayOutput::stalled).
  void set_stalled(std::uint64_t id, int stalled);
  // Preempted (recompute): it runs again from position 0 later; rows already scored are not
  // asked for again.
  void preempted(std::uint64_t id);

  // The plan entry of a scheduled chunk (every field assigned).
  void fill(SeqStep& st, PreparedSeq& p) const;
  // The chunk `st` ran and returned `logits` ([tokens][vocab] when it asked for them): the
  // rows for the monitor, when it asked, and whether the replay is complete (then it is
  // forgotten; its pages are released at the next scheduling call by the caller).
  struct Completed {
    std::optional<ReplayRowsMsg> rows;
    bool finished = false;
  };
  Completed completed(const SeqStep& st, std::vector<float> logits);
  // Forgets one (rejected, failed step): true when the cache manager held it.
  bool drop(std::uint64_t id);
  // Forgets every replay (shutdown); returns those the cache manager holds.
  std::vector<std::uint64_t> clear();

 private:
  struct Replay {
    std::uint64_t id = 0;
    std::shared_ptr<const ReplayRecord> rec;
    std::vector<std::int32_t> tokens;  // rec->replay_tokens(); no block hashes: replays neither
                                       // hit nor fill the prefix cache
    int next_pos = 0;                  // first position whose logits are still needed
    bool running = false;
    int stalled = 0;  // consecutive scheduling calls without a chunk while running
  };
  const Replay* find(std::uint64_t id) const;
  Replay* find(std::uint64_t id);

  double rate_;
  int max_;
  double credit_ = 0.0;
  std::deque<Replay> q_;  // the running one first, then the waiting ones in order
};

}  // namespace strata::actors
