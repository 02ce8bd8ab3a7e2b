// The iteration-level scheduling policy (one call per step), a pure function of the
// batcher's queues and the cache manager. It runs on the cache actor's strand (the manager's
// owner); the batcher hands it its queues by value and gets the step back.
//
// Policy (vLLM v1's, with exact page reservations from cache/kv_cache_manager.h):
//   1. commit the sequences that ran in the previous step, release finished/aborted ones;
//   2. running sequences, oldest admission first: decodes take one token of the budget, a
//      sequence still in prefill takes its next legal chunk (chunked prefill) or its whole
//      prompt (unchunked). When a decode needs a page and none is free, the newest running
//      sequence is preempted (recompute; it may be the one asking) until it fits;
//   3. then candidates (preempted first, then waiting, FCFS), while running < max_num_seqs,
//      tokens remain in max_num_batched_tokens and nothing was preempted in this step. A
//      candidate that does not fit now stops admission (no overtaking); one that can never
//      fit in the whole pool is rejected.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "runtime/step_plan.h"

namespace strata::actors {

struct SchedulerLimits {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 4096;
  bool chunked_prefill = true;
};

struct Candidate {
  std::uint64_t seq_id = 0;
  SeqSpec spec;
};

// A page-table buffer of an earlier step, with the export it holds.
struct SpareTables {
  std::uint64_t seq_id = 0;  // the sequence it was prepared for
  std::uint64_t serial = 0;  // its export serial (KvCacheManager::prepare_*; 0: unknown)
  std::vector<LayerSlots> layers;
};

// The quality guardrail's full-cache replays (actors/replay_queue.h) ride at the lowest
// priority: they get only the token budget served work leaves, at most `chunk` tokens per
// step, and none in a step that carries a served prefill chunk (it would delay that request's
// first token); a new one is admitted only when no served request waits (in.served_queued
// counts them all, admitted in this call or not); and a replay is preempted before any served
// sequence when a served decode needs a page, a served candidate needs pages or a seat. A
// running replay that got no chunk in `max_stalled` consecutive scheduling calls (sustained
// load: a served prefill in every step, or no budget left) is preempted too, so it never
// holds its seat and pages indefinitely; like any preempted replay it is re-admitted, from
// position 0, when the load lets it.
struct ReplayInput {
  std::vector<std::uint64_t> running;  // admitted replays, oldest first
  // Per running replay (same order; missing entries: 0): consecutive scheduling calls without
  // a chunk for it so far (ReplayOutput::stalled of the previous call).
  std::vector<int> stalled;
  std::vector<Candidate> candidates;  // waiting replays, in order
  int served_queued = 0;              // served sequences waiting or preempted (all of them)
  int chunk = 256;
  int max_stalled = 32;
};
struct ReplayOutput {
  std::vector<std::uint64_t> admitted, preempted, rejected;  // rejected: never fit the pool
  // Every replay running after the call (admitted in it included): its stall count (0 when the
  // step carries a chunk of it). Preempted ones are in `preempted` instead.
  std::vector<std::pair<std::uint64_t, int>> stalled;
};

struct ScheduleInput {
  std::vector<std::uint64_t> commit;   // ran in the previous step
  std::vector<std::uint64_t> release;  // finished / aborted: usage reported, then freed
  // Per release (same order, may be shorter, null: none): the names of the full blocks of its
  // prompt + generated tokens, for the prefix cache (KvCacheManager::free).
  std::vector<std::shared_ptr<const std::vector<BlockHash>>> release_names;
  std::vector<std::uint64_t> running;  // admitted, oldest admission first
  std::vector<Candidate> candidates;   // preempted first, then waiting (FCFS)
  SchedulerLimits limits;
  // Buffers of an earlier step's page tables, reused for this step's PreparedSeq::layers: the
  // export writes into existing capacity instead of allocating 2 vectors per layer, and a
  // sequence that gets back the buffer of its last export gets only what changed since (a
  // decode step of a full-cache sequence: usually nothing but the scalars).
  std::vector<SpareTables> spare_tables;
  ReplayInput replays;
  // Censuses of kept positions from the previous step (SeqResult::kept), recorded after the
  // commits (KvCacheManager::record_kept); `census` asks for ScheduleOutput::census.
  std::vector<std::pair<std::uint64_t, std::vector<KeptPositions>>> kept;
  bool census = false;
};

struct PreparedSeq {
  std::uint64_t seq_id = 0;
  bool prefill = true;
  int start = 0;     // position of the first input token
  int n_tokens = 0;  // input tokens (1 for a decode)
  std::vector<LayerSlots> layers;
  std::uint64_t serial = 0;  // the export `layers` holds (SpareTables::serial next time)
  std::uint64_t base = 0;    // the sequence's export before it (SeqStep::table_base)
};

struct ScheduleOutput {
  std::vector<std::pair<std::uint64_t, SeqUsage>> released;     // usage just before the free
  std::vector<PreparedSeq> steps;                               // the next step, plan order
  std::vector<std::uint64_t> admitted;                          // candidates admitted, in order
  std::vector<std::uint64_t> preempted;                         // running sequences preempted
  std::vector<std::pair<std::uint64_t, std::string>> rejected;  // candidates that never fit
  std::vector<std::int32_t> released_pages;
  // Per admitted: prompt tokens from the prefix cache (its prefill starts there).
  std::vector<int> admitted_cached;
  CacheStats stats;
  ReplayOutput replays;            // their steps are in `steps`, after every served one
  bool profile_sparse = false;     // the current profile (stats.profile_version) has a sparse layer
  std::vector<LayerUsage> census;  // KvCacheManager::layer_census(), when in.census
  double job_ms = 0.0;             // time schedule_step() took (on the cache strand)
};

// Consumes in.spare_tables.
ScheduleOutput schedule_step(KvCacheManager& cache, ScheduleInput& in);

}  // namespace strata::actors
