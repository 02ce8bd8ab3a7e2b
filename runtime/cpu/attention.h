// Attention of one sequence in one layer for one KV head and its group of query heads,
// including everything a sparse layer does in a step (docs/contracts.md, DESIGN.md §3,
// docs/sparsity-cpu.md): K/V writes into the sequence's pages, temp pages or scratch;
// causal/paged attention with per-row LSE; decode score averages; `scored` ring leavers;
// kSelect (SnapKV scoring + compaction) and kShrink.
//
// Different KV heads of one call touch disjoint memory, so heads (and sequences) may run on
// different threads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/cpu/kv_pool.h"
#include "runtime/step_plan.h"

namespace strata::cpu {

// How one (layer, KV head)'s K/V are stored: fp32 values, or e4m3 codes with the fixed scales of
// cache.kv_dtype fp8 (runtime/kv_scales.h; written as kv_quantize, read as kv_dequantize,
// compaction copies the codes as they are). Must match the pool's elem_bytes.
struct KvCodec {
  bool fp8 = false;
  float k_scale = 1.0f, v_scale = 1.0f;
  std::size_t elem_bytes() const { return fp8 ? 1 : 4; }
};

struct AttnArgs {
  const LayerSlots* slots = nullptr;  // this layer's state before the step
  std::int32_t start = 0;             // position of row 0
  std::int32_t n = 0;                 // rows (tokens) of this step
  std::int32_t prompt_len = 0;
  bool prefill = true;
  int head_dim = 0;
  int group = 1;    // query heads per KV head
  float scale = 0;  // 1/sqrt(head_dim)
  // Row t of each buffer is at base + t * stride (floats/doubles); the pointers already
  // point at this KV head's part of row 0.
  const float* q = nullptr;  // [group][head_dim] per row, after RoPE
  const float* k = nullptr;  // [head_dim] per row, after RoPE
  const float* v = nullptr;  // [head_dim] per row
  std::size_t q_stride = 0, kv_stride = 0;
  float* out = nullptr;  // [group][head_dim] per row
  std::size_t out_stride = 0;
  double* lse = nullptr;  // [group] per row: natural-log LSE of the row's attention logits
  std::size_t lse_stride = 0;
  // Sparse layer, prompt > capacity, temp_pages empty: the whole prompt's K/V of this head,
  // [prompt_len][head_dim] elements each of the pool's type (filled here, read at kSelect).
  std::byte* scratch_k = nullptr;
  std::byte* scratch_v = nullptr;
  KvCodec codec;            // this layer and head's storage (the pool's type)
  bool fp64_scores = true;  // kSelect scoring in fp64 (oracle) or fp32 (kernel arithmetic)
};

// Runs the step for KV head `head`. Throws InternalError on a plan that breaks the
// contract (the backend validates plans first; these checks are the last line).
void attend(KvPool& pool, int head, const AttnArgs& a);

// The census of one layer of one sequence after a step (SeqStep::report_kept): `after` is the
// layer's state after the step (advance_layer), `tokens` the sequence's positions computed.
// Every local KV head's valid slots are counted by the position recorded when the slot was
// written (attend() records it on every write, selection, ring replacement and shrink).
KeptPositions kept_positions(KvPool& pool, const LayerSlots& after, std::int32_t tokens);

}  // namespace strata::cpu
