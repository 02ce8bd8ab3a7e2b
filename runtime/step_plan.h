// The engine contract between the scheduler/cache manager and a backend: one StepPlan in,
// one StepResult out (see runtime/backend.h and docs/contracts.md).
// Plain header (std only): compiles in host and CUDA translation units.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/kv_layout.h"
#include "runtime/sampling_params.h"
#include "runtime/sparsity_profile.h"

namespace strata {

// What the backend does to one sparse layer of one sequence at the end of this step.
enum class LayerAction : std::uint8_t {
  kNone = 0,
  // Final prefill chunk of a prompt longer than the capacity: score the prompt held in
  // `temp_pages` (or backend scratch), select (policy rules, docs/sparsity.md) and gather
  // the kept slots with their initial scores into `pages`; valid becomes `capacity`.
  kSelect = 1,
  // Live shrink: keep sinks, the ring and the highest-scored selected slots so that
  // `shrink_to` slots remain, compacted into pages[0 .. pages_for_slots(shrink_to)).
  kShrink = 2,
};

// KV state of one sequence in one layer, as it is BEFORE this step.
struct LayerSlots {
  LayerRule rule;                   // policy, capacity, ring, sinks, window of this sequence
  std::int32_t valid = 0;           // slots holding tokens (same count for every KV head)
  std::int32_t ring_pos = 0;        // ring full: oldest ring token at capacity-ring+ring_pos
  std::vector<std::int32_t> pages;  // page table; covers every slot this step writes
  // Sparse layer, prompt longer than capacity, prefill not finished: the prompt's full K/V,
  // laid out like a full layer (token position p at slot p). Empty with kSelect in a step
  // that holds the whole prompt: the backend uses its own scratch.
  std::vector<std::int32_t> temp_pages;
  LayerAction action = LayerAction::kNone;
  std::int32_t shrink_to = 0;  // kShrink only
  // Leading entries of `pages` equal to this layer's `pages` in the sequence's export
  // SeqStep::table_base (0: none known). Backends that keep page tables resident on the device
  // upload only the rest (cuda/table_store.h).
  std::int32_t pages_kept = 0;

  // Does this layer hold the prompt position-by-position (full layer, or a sparse layer
  // whose prompt fits its capacity)? Otherwise prompt K/V go to temp pages/scratch.
  bool direct_prefill(std::int32_t prompt_len) const {
    return !rule.sparse() || prompt_len <= rule.capacity;
  }
  bool ring_full() const { return rule.ring > 0 && valid == rule.capacity; }
  // Slot a decode token is written to (window/scored: into the ring once it is full).
  std::int32_t decode_slot() const {
    return ring_full() ? rule.capacity - rule.ring + ring_pos : valid;
  }
  // State after one decode token (both the cache manager and backends use this).
  void advance_decode() {
    if (ring_full()) {
      ring_pos = (ring_pos + 1) % rule.ring;
    } else {
      ++valid;
    }
  }
};

// One sequence's share of a step: a prefill chunk (tokens at positions [start, start+n))
// or one decode token.
struct SeqStep {
  std::uint64_t seq_id = 0;
  std::vector<std::int32_t> tokens;  // input tokens of this step
  std::int32_t start = 0;            // position of tokens[0] (= tokens already in the cache)
  std::int32_t prompt_len = 0;       // prompt length (after a preemption: prompt + output so far)
  bool prefill = true;               // tokens are prompt tokens (else one decode token)
  bool sample = false;               // sample a token after the last input token
  bool return_logits = false;        // copy out logits of every input position (teacher forcing)
  bool report_kept = false;          // fill SeqResult::kept after the step (admin console)
  std::vector<LayerSlots> layers;    // one per model layer
  // The page-table export `layers` holds (KvCacheManager::prepare_* with a serial; 0: untracked,
  // nothing known) and the sequence's previous tracked export, the one LayerSlots::pages_kept
  // counts from (0: none). Serials are never reused.
  std::uint64_t table_serial = 0;
  std::uint64_t table_base = 0;
  // Pipelined steps only (Backend::submit, docs/contracts.md "Pipelined steps"): a decode row
  // whose input is the token this backend sampled for seq_id in the previous submitted step,
  // which the host has not seen yet. tokens == {kPendingToken}; `output` excludes that token and
  // the backend samples as if it were appended (draw index output->size() + 1, penalties,
  // min_tokens). Resolved by the backend before the step runs; step() never sees such a row.
  bool input_pending = false;
  // Sampling inputs (sample == true only).
  const SamplingParams* params = nullptr;             // owned by the engine, outlives the step
  const std::vector<std::int32_t>* prompt = nullptr;  // for repetition penalty
  const std::vector<std::int32_t>* output = nullptr;  // tokens generated so far
};

// SeqStep::tokens of a row with input_pending (outside every vocabulary: a backend that does
// not resolve it rejects the plan).
inline constexpr std::int32_t kPendingToken = -1;

struct StepPlan {
  std::uint64_t step_id = 0;
  std::vector<SeqStep> seqs;  // prefill chunks and decodes, any order
  // Pages whose contents may be dropped after this step (already freed by the cache
  // manager; listed so backends that keep per-page state can clear it).
  std::vector<std::int32_t> released_pages;
};

struct TopLogprob {
  std::int32_t token = 0;
  float logprob = 0.0f;
};

// Where the slots of one layer of one sequence came from after a step, counted over its valid
// slots and the rank's KV heads (slots x heads) by the token position each slot was written
// for, in a sequence of `tokens` positions after the step:
//   sinks   position <  rule.sinks                 (sparse layers only)
//   recent  position >= tokens - rule.window       (the last α positions; sparse layers only)
//   middle  the rest (every slot of a full layer)
// bins[b] counts the positions p with floor(kPositionBins * p / tokens) == b, all classes.
inline constexpr int kPositionBins = 10;
struct KeptPositions {
  std::int64_t sinks = 0, middle = 0, recent = 0;
  std::array<std::int64_t, kPositionBins> bins{};
  std::int64_t total() const { return sinks + middle + recent; }
  KeptPositions& operator+=(const KeptPositions& o) {
    sinks += o.sinks;
    middle += o.middle;
    recent += o.recent;
    for (int b = 0; b < kPositionBins; ++b) bins[b] += o.bins[b];
    return *this;
  }
  bool operator==(const KeptPositions&) const = default;
};

struct SeqResult {
  std::uint64_t seq_id = 0;
  std::int32_t token = -1;  // sampled token, -1 when the step did not sample
  float logprob = 0.0f;     // of `token`, whatever params->logprobs asks
  // Argmax of the sampled row after penalties (lowest id on ties), -1 when not recorded (the
  // quality guardrail compares it with the full cache's).
  std::int32_t argmax = -1;
  std::vector<TopLogprob> top;  // top-N alternatives, descending
  std::vector<float> logits;    // return_logits: [tokens.size()][vocab], fp32
  // report_kept: one per model layer, counted by runtime/kept_positions.h (CPU and CUDA
  // backends); empty when not asked or when a backend records no positions.
  std::vector<KeptPositions> kept;
};

// Why a step of the pipelined loop (Backend::submit) ran synchronously: the backend finished
// every step in flight, then ran it as step() does (docs/actors.md "Sync steps"). kNone: it was
// pipelined (or ran through step() in the synchronous loop).
enum class SyncReason : std::uint8_t {
  kNone = 0,
  kSyncLoop,      // the engine's synchronous loop (async_steps off, or tp_size > 1): step()
  kBackend,       // the backend does not pipeline (Backend's default submit: the CPU backend)
  kHostSampled,   // a row sampled on the host (logprobs > 20, vocabularies > 2^19)
  kReturnLogits,  // a row returns its logits (guardrail replays)
  kReportKept,    // the kept-positions census (a backend that cannot pipeline it)
  kLmChunks,      // more than one lm_head chunk
  kProfile,       // the forward profile
  kCount
};
inline constexpr int kSyncReasons = static_cast<int>(SyncReason::kCount);
// The Prometheus label value: "none", "sync_loop", "backend", "host_sampled", "return_logits",
// "report_kept", "lm_chunks", "profile".
inline const char* to_string(SyncReason r) {
  constexpr const char* kNames[kSyncReasons] = {"none",         "sync_loop",     "backend",
                                                "host_sampled", "return_logits", "report_kept",
                                                "lm_chunks",    "profile"};
  const int i = static_cast<int>(r);
  return i >= 0 && i < kSyncReasons ? kNames[i] : "unknown";
}

struct StepStats {
  double device_ms = 0.0;  // time the backend spent computing (device time on GPUs)
  double host_ms = 0.0;    // host time inside step() outside device work
  // Device idle since the previous step's last device work, on the device's own timeline (the
  // gap the host leaves between steps, issue 24); -1: not measured (CPU backend, first step).
  double device_gap_ms = -1.0;
  // Page-table bytes the step copied host -> device (CUDA: whole tables, or the resident
  // tables' delta ops and page ids); -1: not measured (CPU backend).
  std::int64_t table_bytes = -1;
  std::int64_t tokens = 0;              // input tokens processed
  SyncReason sync = SyncReason::kNone;  // submit(): ran synchronously, and why
};

struct StepResult {
  std::uint64_t step_id = 0;
  std::vector<SeqResult> seqs;  // same order as StepPlan::seqs
  StepStats stats;
};

}  // namespace strata
