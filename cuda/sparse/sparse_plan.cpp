#include "cuda/sparse/sparse_plan.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"
#include "runtime/kv_layout.h"

namespace strata::cuda::sparse {

PrefillPlan plan_sparse_prefill(const std::vector<PrefillInput>& inputs, int kv_heads) {
  STRATA_CHECK(kv_heads > 0, "kv_heads " + std::to_string(kv_heads));
  PrefillPlan plan;
  std::int64_t score_off = 0, kept_off = 0;
  for (std::size_t n = 0; n < inputs.size(); ++n) {
    const PrefillInput& in = inputs[n];
    const LayerRule& r = in.rule;
    const std::string who = "sparse prefill seq " + std::to_string(n);
    STRATA_CHECK(r.sparse(), who + ": layer is not sparse");
    STRATA_CHECK(r.capacity >= r.sinks + r.window + 1 && r.window > 0,
                 who + ": bad rule (capacity " + std::to_string(r.capacity) + ")");
    STRATA_CHECK(in.prompt_len > 0, who + ": empty prompt");
    STRATA_CHECK(r.pool_kernel >= 1 && r.pool_kernel % 2 == 1, who + ": pool kernel");
    const int L = in.prompt_len;
    PrefillSeq s;
    s.policy = static_cast<std::int32_t>(r.policy);
    s.prompt_len = L;
    s.capacity = r.capacity;
    s.sinks = r.sinks;
    s.window = r.window;
    s.pool_kind = static_cast<std::int32_t>(r.pool);
    s.pool_kernel = r.pool_kernel;
    s.score_off = score_off;
    s.kept_off = kept_off;
    s.dst_table = static_cast<std::int32_t>(plan.dst_pages.size());
    if (in.direct) {
      STRATA_CHECK(L <= r.capacity, who + ": direct chunk ends at " + std::to_string(L) +
                                        " > capacity " + std::to_string(r.capacity));
      STRATA_CHECK(in.chunk_start >= 0 && in.chunk_start < L, who + ": chunk_start");
      STRATA_CHECK(in.last_row >= L - 1 - in.chunk_start, who + ": last_row");
      STRATA_CHECK(static_cast<int>(in.dst_pages.size()) >= pages_for_slots(L),
                   who + ": page table covers " + std::to_string(in.dst_pages.size()) +
                       " pages, chunk ends at slot " + std::to_string(L));
      s.direct = 1;
      s.chunk_start = in.chunk_start;
      s.q_row = in.last_row - (L - 1 - in.chunk_start);
      plan.dst_pages.insert(plan.dst_pages.end(), in.dst_pages.begin(), in.dst_pages.end());
      plan.max_len = std::max(plan.max_len, L);
      plan.seqs.push_back(s);
      continue;  // no scratch: writes the score pool directly
    }
    STRATA_CHECK(L > r.capacity, who + ": select with prompt " + std::to_string(L) +
                                     " <= capacity " + std::to_string(r.capacity));
    const int nq = std::min(r.window, L);
    STRATA_CHECK(in.last_row >= nq - 1, who + ": last_row " + std::to_string(in.last_row));
    const int kept = r.capacity;
    s.q_row = in.last_row - (nq - 1);
    s.kept = kept;

    const int src_need = pages_for_slots(L);
    s.src_table = static_cast<std::int32_t>(plan.src_pages.size());
    if (in.src_pages.empty()) {
      s.src_scratch = 1;
      for (int i = 0; i < src_need; ++i) plan.src_pages.push_back(plan.scratch_pages + i);
      plan.scratch_pages += src_need;
    } else {
      STRATA_CHECK(static_cast<int>(in.src_pages.size()) >= src_need,
                   who + ": source table covers " + std::to_string(in.src_pages.size()) +
                       " pages, prompt needs " + std::to_string(src_need));
      plan.src_pages.insert(plan.src_pages.end(), in.src_pages.begin(), in.src_pages.end());
    }
    const int dst_need = pages_for_slots(kept);
    STRATA_CHECK(static_cast<int>(in.dst_pages.size()) >= dst_need,
                 who + ": destination table covers " + std::to_string(in.dst_pages.size()) +
                     " pages, " + std::to_string(kept) + " slots need " + std::to_string(dst_need));
    plan.dst_pages.insert(plan.dst_pages.end(), in.dst_pages.begin(), in.dst_pages.end());

    score_off += static_cast<std::int64_t>(kv_heads) * L;
    kept_off += static_cast<std::int64_t>(kv_heads) * r.capacity;
    plan.max_len = std::max(plan.max_len, L);
    plan.max_kept = std::max(plan.max_kept, kept);
    plan.seqs.push_back(s);
  }
  plan.score_floats = static_cast<std::size_t>(score_off);
  plan.kept_elems = static_cast<std::size_t>(kept_off);
  return plan;
}

DecodeSeq make_decode_seq(const LayerRule& rule, int valid, int ring_pos, int table, int q_row) {
  // snapkv appends past C (the planner reserved C + max_tokens slots).
  STRATA_CHECK(valid >= 0 &&
                   (rule.policy == Policy::kSnapKv || rule.capacity == 0 || valid <= rule.capacity),
               "decode seq: valid " + std::to_string(valid));
  STRATA_CHECK(rule.ring == 0 || (ring_pos >= 0 && ring_pos < rule.ring),
               "decode seq: ring_pos " + std::to_string(ring_pos));
  DecodeSeq s;
  s.policy = static_cast<std::int32_t>(rule.policy);
  s.capacity = rule.capacity;
  s.ring = rule.ring;
  s.sinks = rule.sinks;
  s.window = rule.window;
  s.valid = valid;
  s.ring_pos = ring_pos;
  s.table = table;
  s.q_row = q_row;
  return s;
}

DecodeLayerMeta decode_layer_meta(const LayerSlots& ls, int position, int table, int q_row) {
  DecodeLayerMeta m;
  if (!ls.rule.sparse()) {
    STRATA_CHECK(position >= 0, "decode at position " + std::to_string(position));
    m.seq_len = position + 1;
    m.slot = position;
    return m;  // m.seq: policy 0, skipped by the resolve/update kernels
  }
  // The update kernel recomputes these from DecodeSeq (attended: C once the ring is full,
  // else valid + 1; new slot: C - ring + ring_pos, else valid): the same arithmetic as
  // LayerSlots, so attention, K/V write and score update agree on every slot.
  m.seq_len = ls.ring_full() ? ls.rule.capacity : ls.valid + 1;
  m.slot = ls.decode_slot();
  m.seq = make_decode_seq(ls.rule, ls.valid, ls.ring_pos, table, q_row);
  m.seq.position = position;  // the census position of the slot the token goes to
  return m;
}

void check_decode_reads(const LayerSlots& ls, int position, const DecodeLayerMeta& m,
                        int table_pages) {
  const bool sparse = ls.rule.sparse();
  const int held = sparse ? ls.valid : position;  // slots holding tokens before the step
  // Built only when a check fails (STRATA_CHECK evaluates its message lazily).
  auto who = [&] {
    return std::string("decode reads (") + to_string(ls.rule.policy) + ", valid " +
           std::to_string(ls.valid) + ", ring_pos " + std::to_string(ls.ring_pos) + ", position " +
           std::to_string(position) + "): ";
  };
  STRATA_CHECK(held >= 0, who() + "negative slot count");
  STRATA_CHECK(m.slot >= 0 && m.slot <= held, who() + "K/V write at slot " +
                                                  std::to_string(m.slot) + " past the " +
                                                  std::to_string(held) + " held slots + 1");
  STRATA_CHECK(m.seq_len > m.slot && m.seq_len <= std::max(held, m.slot + 1),
               who() + "attention over " + std::to_string(m.seq_len) +
                   " slots: not the held slots plus the written slot " + std::to_string(m.slot));
  if (sparse) {
    // What the resolve/update kernels recompute from DecodeSeq (cuda/sparse/sparse_decode.cu).
    const DecodeSeq& d = m.seq;
    const bool full = d.ring > 0 && d.valid == d.capacity;
    const int attended = full ? d.capacity : d.valid + 1;
    const int new_slot = full ? d.capacity - d.ring + d.ring_pos : d.valid;
    STRATA_CHECK(d.policy == static_cast<std::int32_t>(ls.rule.policy) && d.valid == ls.valid &&
                     d.capacity == ls.rule.capacity && d.ring == ls.rule.ring &&
                     d.ring_pos == ls.ring_pos && d.sinks == ls.rule.sinks,
                 who() + "DecodeSeq does not mirror the layer's state");
    STRATA_CHECK(attended == m.seq_len && new_slot == m.slot,
                 who() + "update kernel would attend " + std::to_string(attended) +
                     " slots / write " + std::to_string(new_slot) + ", attention " +
                     std::to_string(m.seq_len) + " / " + std::to_string(m.slot));
    STRATA_CHECK(!full || d.policy != static_cast<std::int32_t>(Policy::kScored) ||
                     (d.capacity <= held && d.sinks < d.capacity - d.ring),
                 who() + "resolve reads slots [sinks, C) that are not held");
  } else {
    STRATA_CHECK(m.seq.policy == 0, who() + "full layer with a sparse DecodeSeq");
  }
  const int pages = pages_for_slots(std::max(m.seq_len, m.slot + 1));
  STRATA_CHECK(pages <= table_pages, who() + "reads " + std::to_string(pages) +
                                         " pages of a table uploaded with " +
                                         std::to_string(table_pages));
}

ShrinkSeq make_shrink_seq(const LayerRule& rule, int valid, int ring_pos, int shrink_to, int table,
                          std::int64_t stage_off) {
  STRATA_CHECK(rule.sparse(), "shrink on a full layer");
  STRATA_CHECK(shrink_to > rule.sinks + rule.window,
               "shrink_to " + std::to_string(shrink_to) + " must exceed sinks + window");
  STRATA_CHECK(valid >= 0 && (rule.ring == 0 || (ring_pos >= 0 && ring_pos < rule.ring)),
               "shrink: valid " + std::to_string(valid) + " ring_pos " + std::to_string(ring_pos));
  ShrinkSeq s;
  s.policy = static_cast<std::int32_t>(rule.policy);
  s.capacity = rule.capacity;
  s.ring = rule.ring;
  s.sinks = rule.sinks;
  s.window = rule.window;
  s.valid = valid;
  s.ring_pos = ring_pos;
  s.shrink_to = shrink_to;
  s.table = table;
  s.stage_off = stage_off;
  return s;
}

}  // namespace strata::cuda::sparse
