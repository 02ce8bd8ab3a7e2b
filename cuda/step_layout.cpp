// The plan half of a CUDA step (see the header). Moved out of CudaBackendImpl::step: the same
// staging values, row order, graph choice and sampling routes; the contract checks are now the
// shared validator's (runtime/step_plan_check.h), CUDA's own checks stay here.
#include "cuda/step_layout.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "cuda/sampling_prep.h"
#include "runtime/error.h"
#include "runtime/kv_layout.h"
#include "runtime/step_plan_check.h"

namespace strata::cuda {

namespace {

constexpr int kMaxSplits = 64;  // cuda/attention.h kMaxDecodeSplits (checked there: run.cpp)
constexpr std::size_t kBf16Bytes = 2;

std::size_t align_up(std::size_t n, std::size_t a = 256) {
  return (n + a - 1) / a * a;
}

// Greedy without anything the device argmax cannot do (penalties, logit_bias, logprobs, an
// active min_tokens ban).
bool device_greedy(const SeqStep& s) {
  const SamplingParams* p = s.params;
  return p && p->temperature == 0.0f && p->logprobs < 0 && p->logit_bias.empty() &&
         p->repetition_penalty == 1.0f && p->frequency_penalty == 0.0f &&
         p->presence_penalty == 0.0f &&
         (p->min_tokens == 0 || (s.output && static_cast<int>(s.output->size()) >= p->min_tokens));
}

// Runs through the decode kernel: single tokens (decodes, and one-token prefill chunks whose
// sparse layers all hold the prompt directly).
bool is_decode_row(const SeqStep& s) {
  if (s.tokens.size() != 1) return false;
  if (!s.prefill) return true;
  for (const LayerSlots& ls : s.layers)
    if (ls.rule.sparse() && (!ls.direct_prefill(s.prompt_len) || ls.action == LayerAction::kSelect))
      return false;
  return true;
}

}  // namespace

int pick_decode_splits(int batch, int max_len, int kv_heads, int num_sms) {
  const int by_sms = (2 * num_sms + batch * kv_heads - 1) / std::max(1, batch * kv_heads);
  const int by_len = std::max(1, (max_len + 255) / 256);
  return std::clamp(std::min(by_sms, by_len), 1, kMaxSplits);
}

StepImageLayout StepImageLayout::for_limits(const StepLimits& lim) {
  StepImageLayout at;
  std::size_t end = 0;
  auto section = [&](std::size_t elems, std::size_t elem_bytes) {
    const std::size_t off = end;
    end = align_up(end + elems * elem_bytes);
    return off;
  };
  const std::size_t T = static_cast<std::size_t>(lim.max_tokens);
  const std::size_t S = static_cast<std::size_t>(lim.max_seqs);
  const std::size_t tiles = static_cast<std::size_t>(lim.max_tiles);
  const std::size_t per_layer = static_cast<std::size_t>(lim.num_layers) * S;
  const std::size_t i32 = sizeof(std::int32_t);
  at.tokens = section(T, i32);
  at.pos = section(T, i32);
  at.seq_of = section(T, i32);
  at.lm_rows = section(T, i32);
  at.q_row = section(S, i32);
  at.row_start = section(S, i32);
  at.nq = section(S, i32);
  at.qpos0 = section(S, i32);
  at.tile_seq = section(tiles, i32);
  at.tile_q0 = section(tiles, i32);
  at.seq_len = section(per_layer, i32);
  at.slots = section(per_layer, i32);
  at.dec_seqs = section(per_layer, sizeof(sparse::DecodeSeq));
  at.tables = section(per_layer * static_cast<std::size_t>(lim.max_table_pages), i32);
  at.table_ops = section(TableStore::max_ops(lim.max_seqs, lim.num_layers), sizeof(TableOp));
  at.bytes = end;
  return at;
}

StepImage::StepImage(std::span<std::byte> mem, const StepImageLayout& layout)
    : base_(mem.data()), at_(layout) {
  if (mem.size() < layout.bytes || reinterpret_cast<std::uintptr_t>(mem.data()) % 16 != 0)
    throw InternalError("StepImage: " + std::to_string(mem.size()) + " bytes (16-aligned) for " +
                        std::to_string(layout.bytes));
}

StepPlanner::StepPlanner(StepLimits limits)
    : lim_(std::move(limits)),
      checker_(StepPlanLimits{.num_layers = lim_.num_layers,
                              .vocab_size = lim_.vocab,
                              .num_pages = lim_.num_pages,
                              .max_seqs = lim_.max_seqs,
                              .max_tokens = lim_.max_tokens,
                              .max_positions = lim_.max_table_pages * kBlockSize}),
      store_(lim_.max_seqs, lim_.num_layers, lim_.max_table_pages) {}

// The StepPlan contract is checked by the one validator of runtime/step_plan_check.h (with
// this backend's workspace as its step limits and max_model_len as its positions); what is
// checked on top is CUDA's own: the prefill scratch (stage_rows) and the decode kernels' reads
// (stage_decode_row: sparse::check_decode_reads).
void StepPlanner::build(const StepPlan& plan, const StepOptions& opt, const StepImage& image,
                        StepLayout& out) {
  const int S = static_cast<int>(plan.seqs.size());
  out = StepLayout{};
  out.num_seqs = S;
  checker_.check(plan);
  if (S == 0) return;
  order_rows(plan, out);
  measure(plan, out);
  out.table_deltas = opt.device_tables;
  if (out.table_deltas) {
    if (!store_synced_) store_.forget();  // whole tables were uploaded since
    store_synced_ = true;
    place_table_rows(plan, image, out);
  } else {
    store_synced_ = false;
    out.table_row.resize(static_cast<std::size_t>(S));
    for (int k = 0; k < S; ++k) out.table_row[static_cast<std::size_t>(k)] = k;
    out.table_rows = S;
  }
  std::vector<std::vector<sparse::PrefillInput>> pre(static_cast<std::size_t>(lim_.num_layers));
  stage_rows(plan, image, out, pre);
  collect_lm_rows(plan, image, out);
  choose_launch(opt, image, out);
  plan_sparse_work(plan, pre, out);
  plan_logits(plan, out);
  if (out.table_deltas) {
    out.table_ops = store_.num_ops();
    out.table_data = store_.num_data();
    const int cap =
        lim_.table_delta_entries > 0
            ? lim_.table_delta_entries
            : TableStore::delta_entries(lim_.max_seqs, lim_.num_layers, lim_.max_table_pages);
    out.table_rounds = store_.rounds(std::max(cap, lim_.max_table_pages));
    out.table_bytes = store_.bytes();
    store_.commit();  // (last: a plan that throws leaves the mirror as the device has it)
  } else {
    out.table_bytes = static_cast<std::int64_t>(S) * lim_.num_layers * out.table_pages * 4;
  }
}

// Device tables: every sequence's row of the resident store (cuda/table_store.h). Decode rows
// are ordered by their row (= batch index), so the row order follows the store, not the plan.
void StepPlanner::place_table_rows(const StepPlan& plan, const StepImage& image, StepLayout& out) {
  const int S = out.num_seqs;
  keys_.resize(static_cast<std::size_t>(S));
  for (int i = 0; i < S; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    keys_[static_cast<std::size_t>(i)] = {s.seq_id, s.table_serial, s.table_base,
                                          out.decode_row[static_cast<std::size_t>(i)] != 0};
  }
  const StepImageLayout& at = image.layout();
  store_.begin(
      keys_,
      std::span<TableOp>(image.table_ops(), TableStore::max_ops(lim_.max_seqs, lim_.num_layers)),
      std::span<std::int32_t>(image.tables(), (at.table_ops - at.tables) / 4));
  int decode = 0;
  for (int k = 0; k < S; ++k)
    decode += out.decode_row[static_cast<std::size_t>(out.order[static_cast<std::size_t>(k)])] != 0;
  std::vector<int> by_row(static_cast<std::size_t>(decode), -1);
  out.table_row.assign(static_cast<std::size_t>(S), -1);
  for (int k = 0; k < S; ++k) {
    const int i = out.order[static_cast<std::size_t>(k)];
    const int r = store_.row_of(i);
    if (k < decode) {
      if (r < 0 || r >= decode || by_row[static_cast<std::size_t>(r)] >= 0)
        throw InternalError("TableStore: decode row " + std::to_string(r) + " of " +
                            std::to_string(decode));
      by_row[static_cast<std::size_t>(r)] = i;
    } else {
      out.table_row[static_cast<std::size_t>(k)] = r;
    }
  }
  for (int b = 0; b < decode; ++b) {
    out.order[static_cast<std::size_t>(b)] = by_row[static_cast<std::size_t>(b)];
    out.table_row[static_cast<std::size_t>(b)] = b;
  }
  out.table_rows = 0;
  for (int r : out.table_row) out.table_rows = std::max(out.table_rows, r + 1);
  // Rows of this step that hold no prefill sequence: zero (never read: no tile names them).
  std::fill(image.row_start(), image.row_start() + out.table_rows, 0);
  std::fill(image.nq(), image.nq() + out.table_rows, 0);
  std::fill(image.qpos0(), image.qpos0() + out.table_rows, 0);
}

void StepPlanner::order_rows(const StepPlan& plan, StepLayout& out) const {
  const int S = out.num_seqs;
  out.decode_row.resize(static_cast<std::size_t>(S));
  for (int i = 0; i < S; ++i)
    out.decode_row[static_cast<std::size_t>(i)] =
        is_decode_row(plan.seqs[static_cast<std::size_t>(i)]);
  out.order.reserve(static_cast<std::size_t>(S));
  for (int pass = 0; pass < 2; ++pass)
    for (int i = 0; i < S; ++i)
      if ((out.decode_row[static_cast<std::size_t>(i)] != 0) == (pass == 0)) out.order.push_back(i);
}

// Sizes of the step and which eager sparse work it holds.
void StepPlanner::measure(const StepPlan& plan, StepLayout& out) const {
  int T = 0, max_pages = 1;
  for (int i = 0; i < out.num_seqs; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
    const bool dec = out.decode_row[static_cast<std::size_t>(i)] != 0;
    for (const LayerSlots& ls : s.layers) {
      if (ls.action == LayerAction::kShrink) out.shrink = true;
      if (!dec && ls.rule.sparse() &&
          (ls.direct_prefill(s.prompt_len) || ls.action == LayerAction::kSelect))
        out.sparse_prefill = true;
    }
    max_pages = std::max(max_pages, pages_for_slots(s.start + n));
    T += n;
  }
  out.rows = T;
  out.table_pages = max_pages;
}

// Rows, tables, prefill tiles and sparse prefill inputs into the image, in row order.
void StepPlanner::stage_rows(const StepPlan& plan, const StepImage& image, StepLayout& out,
                             std::vector<std::vector<sparse::PrefillInput>>& pre) {
  const int L = lim_.num_layers, S = out.num_seqs, max_pages = out.table_pages;
  int row = 0, scratch_used = 0;
  out.first_row.assign(static_cast<std::size_t>(S), 0);
  for (int k = 0; k < S; ++k) {
    const int i = out.order[static_cast<std::size_t>(k)];
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
    const bool dec = out.decode_row[static_cast<std::size_t>(i)] != 0;
    const int trow = out.table_row[static_cast<std::size_t>(k)];
    out.first_row[static_cast<std::size_t>(i)] = row;
    for (int t = 0; t < n; ++t) {
      image.tokens()[row + t] = s.tokens[static_cast<std::size_t>(t)];
      image.pos()[row + t] = s.start + t;
      image.seq_of()[row + t] = trow;
    }
    // Scratch pages of this sequence (shared by its layers: they run one after another).
    std::vector<std::int32_t> scratch_ids;
    for (const LayerSlots& ls : s.layers)
      if (!dec && ls.rule.sparse() && !ls.direct_prefill(s.prompt_len) && ls.temp_pages.empty()) {
        const int np = pages_for_slots(n);
        if (scratch_used + np > lim_.scratch_pages)
          throw InternalError("CUDA backend: prefill scratch exhausted (" +
                              std::to_string(scratch_used + np) + " > " +
                              std::to_string(lim_.scratch_pages) + " pages)");
        for (int pi = 0; pi < np; ++pi) scratch_ids.push_back(lim_.num_pages + scratch_used + pi);
        scratch_used += np;
        break;
      }
    for (int l = 0; l < L; ++l) {
      const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
      const bool via_temp = !dec && ls.rule.sparse() && !ls.direct_prefill(s.prompt_len);
      const std::vector<std::int32_t>& tab =
          via_temp ? (ls.temp_pages.empty() ? scratch_ids : ls.temp_pages) : ls.pages;
      if (out.table_deltas) {
        store_.stage(i, l, tab, !via_temp, via_temp ? 0 : ls.pages_kept);
      } else {
        const int cnt = std::min<int>(static_cast<int>(tab.size()), max_pages);
        int* tr = image.tables() + (static_cast<std::size_t>(k) * L + l) * max_pages;
        std::memcpy(tr, tab.data(), cnt * sizeof(int));
        // Entries past the table: page 0, not whatever an earlier step left in the staging (no
        // kernel reads them: sparse::check_decode_reads and the checks above hold every read
        // inside [0, cnt)), so the uploaded table is a function of this step's plan only.
        std::fill(tr + cnt, tr + max_pages, 0);
      }
      if (dec || !ls.rule.sparse()) continue;
      if (ls.direct_prefill(s.prompt_len)) {
        sparse::PrefillInput in;
        in.rule = ls.rule;
        in.prompt_len = s.start + n;
        in.direct = true;
        in.chunk_start = s.start;
        in.last_row = row + n - 1;
        in.dst_pages = ls.pages;
        pre[static_cast<std::size_t>(l)].push_back(std::move(in));
      } else if (ls.action == LayerAction::kSelect) {
        sparse::PrefillInput in;
        in.rule = ls.rule;
        in.prompt_len = s.prompt_len;
        in.last_row = row + n - 1;
        in.src_pages = ls.temp_pages.empty() ? scratch_ids : ls.temp_pages;
        in.dst_pages = ls.pages;
        pre[static_cast<std::size_t>(l)].push_back(std::move(in));
      }
    }
    // Prefill-only entries; zero for decode rows (never read: no tile names them).
    image.row_start()[trow] = dec ? 0 : row;
    image.nq()[trow] = dec ? 0 : n;
    image.qpos0()[trow] = dec ? 0 : s.start;
    if (dec) {
      stage_decode_row(s, k, row, image, out);
    } else {
      for (int q0 = 0; q0 < n; q0 += 64) {
        image.tile_seq()[out.tiles] = trow;
        image.tile_q0()[out.tiles] = q0;
        ++out.tiles;
      }
    }
    row += n;
  }
}

// Decode metadata of the decode row at order index k (= its decode batch index).
void StepPlanner::stage_decode_row(const SeqStep& s, int k, int row, const StepImage& image,
                                   StepLayout& out) const {
  const int L = lim_.num_layers, b = out.decode_rows;
  image.q_row()[b] = row;
  out.max_len = std::max(out.max_len, s.start + 1);
  for (int l = 0; l < L; ++l) {
    const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
    const std::size_t at = static_cast<std::size_t>(l) * lim_.max_seqs + b;
    const sparse::DecodeLayerMeta m =
        sparse::decode_layer_meta(ls, s.start, (k * L + l) * lim_.max_table_pages, row);
    // Every slot and table entry the decode kernels read is held or written this step.
    sparse::check_decode_reads(ls, s.start, m,
                               std::min<int>(static_cast<int>(ls.pages.size()), out.table_pages));
    image.seq_len()[at] = m.seq_len;
    image.slots()[at] = m.slot;
    image.dec_seqs()[at] = m.seq;
    if (ls.rule.sparse()) {
      out.dec_max_slots = std::max(out.dec_max_slots, m.seq_len);
      out.sparse_decode = true;
    }
  }
  ++out.decode_rows;
}

// Rows whose logits are needed: the sampled last token, every token with return_logits.
void StepPlanner::collect_lm_rows(const StepPlan& plan, const StepImage& image,
                                  StepLayout& out) const {
  int n_lm = 0;
  for (int i = 0; i < out.num_seqs; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
    const int r0 = out.first_row[static_cast<std::size_t>(i)];
    if (s.return_logits) {
      for (int t = 0; t < n; ++t) image.lm_rows()[n_lm++] = r0 + t;
    } else if (s.sample) {
      image.lm_rows()[n_lm++] = r0 + n - 1;
    }
  }
  out.lm_rows = n_lm;
}

// Decode-only steps replay a CUDA graph of the smallest bucket that fits (steps with a
// kShrink run eagerly; so do steps whose decode rows touch sparse layers unless
// sparse_graphs). Decode attention splits: eager steps take them from the batch and the
// longest sequence; full-cache graphs from the bucket and max_model_len (one graph per
// bucket); sparse decode graphs use the eager count (part of the key), so that replay does
// the same arithmetic as eager (issue 9: a different split count reorders the softmax sums).
void StepPlanner::choose_launch(const StepOptions& opt, const StepImage& image,
                                StepLayout& out) const {
  const int L = lim_.num_layers, S_dec = out.decode_rows;
  const bool decode_only = out.tiles == 0 && out.lm_rows <= S_dec && !out.shrink;
  int bucket = 0;
  if (opt.graphs && decode_only && (!out.sparse_decode || opt.sparse_graphs))
    for (int b : lim_.graph_buckets)
      if (b >= S_dec) {
        bucket = b;
        break;
      }
  out.eager_splits = opt.forced_splits > 0 ? opt.forced_splits
                                           : pick_decode_splits(std::max(S_dec, 1), out.max_len,
                                                                lim_.kv_heads, lim_.num_sms);
  out.run_rows = out.rows, out.run_decode_rows = S_dec, out.run_lm_rows = out.lm_rows;
  if (bucket == 0) return;
  // Pad to the bucket: padding rows are token 0, seq_of -1 (no KV write), seq_len 0.
  for (int b = S_dec; b < bucket; ++b) {
    image.tokens()[b] = 0, image.pos()[b] = 0, image.seq_of()[b] = -1, image.q_row()[b] = b;
    for (int l = 0; l < L; ++l) {
      const std::size_t at = static_cast<std::size_t>(l) * lim_.max_seqs + b;
      image.seq_len()[at] = 0, image.slots()[at] = 0, image.dec_seqs()[at] = sparse::DecodeSeq{};
    }
  }
  for (int b = 0; b < bucket; ++b) image.lm_rows()[b] = b;  // all rows; lm slots map results
  out.run_rows = out.run_decode_rows = out.run_lm_rows = bucket;
  // Sparse decode graphs are keyed by a power-of-two bound on the attended slots (the
  // update kernel's grid); full-cache graphs by 0.
  int slot_bucket = 0;
  if (out.sparse_decode) {
    slot_bucket = 64;
    while (slot_bucket < out.dec_max_slots) slot_bucket *= 2;
  }
  out.graph.bucket = bucket;
  out.graph.slot_bucket = slot_bucket;
  out.graph.splits = out.sparse_decode || opt.forced_splits > 0
                         ? out.eager_splits
                         : pick_decode_splits(bucket, lim_.max_table_pages * kBlockSize,
                                              lim_.kv_heads, lim_.num_sms);
}

// Eager sparse work of this step: metadata of every layer (one upload) and kernel scratch
// shared by the layers (they run one after another on the stream), as named byte offsets.
void StepPlanner::plan_sparse_work(const StepPlan& plan,
                                   const std::vector<std::vector<sparse::PrefillInput>>& pre,
                                   StepLayout& out) const {
  SparseWorkLayout& sw = out.sparse;
  if (!out.sparse_prefill && !out.shrink) return;
  const int L = lim_.num_layers, kvh = lim_.kv_heads;
  sw.any = true;
  sw.layers.assign(static_cast<std::size_t>(L), SparseLayerWork{});
  std::vector<unsigned char>& meta = sw.meta;
  auto put = [&](const void* src, std::size_t bytes) {
    const std::size_t off = align_up(meta.size());
    meta.resize(off + bytes);
    if (bytes) std::memcpy(meta.data() + off, src, bytes);
    return off;
  };
  std::size_t score_floats = 0, kept_elems = 0, stage_slots = 0;
  for (int l = 0; l < L; ++l) {
    SparseLayerWork& w = sw.layers[static_cast<std::size_t>(l)];
    const auto& ins = pre[static_cast<std::size_t>(l)];
    if (!ins.empty()) {
      const sparse::PrefillPlan pl = sparse::plan_sparse_prefill(ins, kvh);
      w.prefill_seqs = put(pl.seqs.data(), pl.seqs.size() * sizeof(sparse::PrefillSeq));
      w.src_pages = put(pl.src_pages.data(), pl.src_pages.size() * sizeof(std::int32_t));
      w.dst_pages = put(pl.dst_pages.data(), pl.dst_pages.size() * sizeof(std::int32_t));
      w.prefill_num_seqs = static_cast<int>(pl.seqs.size());
      w.prefill_max_len = pl.max_len;
      w.prefill_max_kept = pl.max_kept;
      score_floats = std::max(score_floats, pl.score_floats);
      kept_elems = std::max(kept_elems, pl.kept_elems);
    }
    std::vector<sparse::ShrinkSeq> shr;
    std::vector<std::int32_t> shr_pages;
    std::int64_t stage = 0;
    for (int k = 0; k < out.num_seqs; ++k) {
      const SeqStep& s =
          plan.seqs[static_cast<std::size_t>(out.order[static_cast<std::size_t>(k)])];
      const LayerSlots& ls = s.layers[static_cast<std::size_t>(l)];
      if (ls.action != LayerAction::kShrink) continue;
      LayerSlots post;  // counters only (no table copy)
      post.rule = ls.rule;
      post.valid = ls.valid;
      post.ring_pos = ls.ring_pos;
      advance_layer_before_shrink(post, layer_step(s, ls));
      shr.push_back(sparse::make_shrink_seq(ls.rule, post.valid, post.ring_pos, ls.shrink_to,
                                            static_cast<int>(shr_pages.size()), stage));
      shr_pages.insert(shr_pages.end(), ls.pages.begin(), ls.pages.end());
      stage += static_cast<std::int64_t>(kvh) * ls.shrink_to;
    }
    if (!shr.empty()) {
      w.shrink_seqs = put(shr.data(), shr.size() * sizeof(sparse::ShrinkSeq));
      w.shrink_pages = put(shr_pages.data(), shr_pages.size() * sizeof(std::int32_t));
      w.shrink_num_seqs = static_cast<int>(shr.size());
      stage_slots = std::max(stage_slots, static_cast<std::size_t>(stage));
    }
  }
  // Scratch after the metadata.
  SparseScratch& sc = sw.scratch;
  std::size_t at = align_up(meta.size());
  sc.raw = at;
  at = align_up(at + score_floats * sizeof(float));
  sc.pooled = at;
  at = align_up(at + score_floats * sizeof(float));
  sc.kept_idx = at;
  at = align_up(at + kept_elems * sizeof(std::int32_t));
  sc.kept_score = at;
  at = align_up(at + kept_elems * sizeof(float));
  sc.stage_idx = at;
  at = align_up(at + stage_slots * sizeof(std::int32_t));
  sc.stage_kv = at;
  at = align_up(at + stage_slots * 2 * lim_.head_dim * kBf16Bytes);
  sc.stage_score = at;
  at = align_up(at + stage_slots * sizeof(float));
  sc.stage_pos = at;
  at = align_up(at + stage_slots * sizeof(std::int32_t) + 1);
  sc.bytes = at;
}

// Row r of the logits buffer is lm row base + r of the current chunk; per chunk, which rows go
// to the host in full and which sequences the device sampler draws.
void StepPlanner::plan_logits(const StepPlan& plan, StepLayout& out) const {
  const int S = out.num_seqs;
  const bool graph = out.graph.bucket > 0;
  out.lm.assign(static_cast<std::size_t>(S), LmSlot{});
  out.route.assign(static_cast<std::size_t>(S), SampleRoute::kNone);
  int k = 0;
  for (int i = 0; i < S; ++i) {
    const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
    const int n = static_cast<int>(s.tokens.size());
    LmSlot& slot = out.lm[static_cast<std::size_t>(i)];
    if (graph) {
      if (s.sample || s.return_logits) slot = {out.first_row[static_cast<std::size_t>(i)], 1};
    } else if (s.return_logits) {
      slot = {k, n}, k += n;
    } else if (s.sample) {
      slot = {k, 1}, k += 1;
    }
    if (!s.sample) continue;
    SampleRoute& route = out.route[static_cast<std::size_t>(i)];
    if (device_greedy(s))
      route = SampleRoute::kDeviceArgmax;
    else if (s.params && device_sampling_supported(*s.params, lim_.vocab))
      route = SampleRoute::kDeviceSampler;
    else
      route = SampleRoute::kHost;
  }
  for (int base = 0; base < out.run_lm_rows; base += lim_.logit_rows) {
    LmChunk& c = out.chunks.emplace_back();
    c.base = base;
    c.rows = std::min(lim_.logit_rows, out.run_lm_rows - base);
    for (int i = 0; i < S; ++i) {
      const SeqStep& s = plan.seqs[static_cast<std::size_t>(i)];
      const LmSlot slot = out.lm[static_cast<std::size_t>(i)];
      if (slot.first < 0) continue;
      const int last = slot.first + slot.count - 1;
      const SampleRoute route = out.route[static_cast<std::size_t>(i)];
      const bool sampled_here = s.sample && last >= base && last < base + c.rows;
      if (sampled_here && route == SampleRoute::kDeviceSampler) c.device_sampled.push_back(i);
      if (!s.return_logits && !(s.sample && route == SampleRoute::kHost)) continue;
      for (int r = std::max(slot.first, base); r <= std::min(last, base + c.rows - 1); ++r)
        c.host_rows.push_back(r - base);
    }
  }
}

}  // namespace strata::cuda
