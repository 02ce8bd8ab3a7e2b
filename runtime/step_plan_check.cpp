#include "runtime/step_plan_check.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace strata {
namespace {

std::string seq_where(std::size_t i, std::uint64_t id) {
  return "step plan: seq #" + std::to_string(i) + " (id " + std::to_string(id) + "): ";
}

std::string layer_where(std::size_t i, std::uint64_t id, std::size_t l) {
  return "step plan: seq #" + std::to_string(i) + " (id " + std::to_string(id) + ") layer " +
         std::to_string(l) + ": ";
}

bool covers(const std::vector<std::int32_t>& pages, std::int64_t slots) {
  return static_cast<std::int64_t>(pages.size()) * kBlockSize >= slots;
}

// The ring a sparse rule of this policy and capacity has (LayerRule::ring's definition).
int ring_of(const LayerRule& r, int capacity) {
  switch (r.policy) {
    case Policy::kScored:
      return r.window;
    case Policy::kWindow:
      return capacity - r.sinks;
    default:
      return 0;
  }
}

}  // namespace

// ---- The state rule --------------------------------------------------------------------

LayerStep layer_step(const SeqStep& s, const LayerSlots& ls) {
  LayerStep st;
  st.n = static_cast<std::int32_t>(s.tokens.size());
  st.prefill = s.prefill;
  st.prompt_len = s.prompt_len;
  st.select = ls.action == LayerAction::kSelect;
  st.shrink_to = ls.action == LayerAction::kShrink ? ls.shrink_to : 0;
  return st;
}

void advance_layer_before_shrink(LayerSlots& ls, const LayerStep& step) {
  if (!step.prefill) {
    ls.advance_decode();
  } else if (ls.direct_prefill(step.prompt_len)) {
    ls.valid += step.n;
  } else if (step.select) {
    ls.valid = ls.rule.capacity;
    ls.ring_pos = 0;
  }
}

void advance_layer(LayerSlots& ls, const LayerStep& step) {
  advance_layer_before_shrink(ls, step);
  if (step.shrink_to > 0) {
    ls.valid = std::min(ls.valid, step.shrink_to);
    ls.ring_pos = 0;
    ls.rule.capacity = step.shrink_to;
    ls.rule.ring = ring_of(ls.rule, step.shrink_to);
  }
}

// ---- The validator ---------------------------------------------------------------------

StepPlanChecker::StepPlanChecker(const StepPlanLimits& limits)
    : limits_(limits), page_mark_(static_cast<std::size_t>(std::max(limits.num_pages, 0)), 0) {}

void validate_step_plan(const StepPlan& plan, const StepPlanLimits& limits) {
  StepPlanChecker(limits).check(plan);
}

// Pages [first, last) of `pages` are written this step: no other table of the step may
// write them.
void StepPlanChecker::mark(const std::vector<std::int32_t>& pages, std::size_t first,
                           std::size_t last, std::size_t seq, std::uint64_t seq_id,
                           std::size_t layer) {
  for (std::size_t i = first; i < last && i < pages.size(); ++i) {
    auto& m = page_mark_[static_cast<std::size_t>(pages[i])];
    if (m == generation_)
      throw InternalError(layer_where(seq, seq_id, layer) + "page " + std::to_string(pages[i]) +
                          " is written twice in one step (shared between tables)");
    m = generation_;
  }
}

void StepPlanChecker::check(const StepPlan& plan) {
  const StepPlanLimits& lim = limits_;
  if (++generation_ == 0) {  // wrapped: forget every mark
    std::fill(page_mark_.begin(), page_mark_.end(), 0u);
    generation_ = 1;
  }
  if (lim.max_seqs > 0 && plan.seqs.size() > static_cast<std::size_t>(lim.max_seqs))
    throw InternalError("step plan: " + std::to_string(plan.seqs.size()) +
                        " sequences, the backend runs at most " + std::to_string(lim.max_seqs));
  std::int64_t step_tokens = 0;
  for (std::size_t i = 0; i < plan.seqs.size(); ++i) {
    const SeqStep& s = plan.seqs[i];
    auto seq_fail = [&](const std::string& m) { throw InternalError(seq_where(i, s.seq_id) + m); };
    if (s.layers.size() != static_cast<std::size_t>(lim.num_layers))
      seq_fail(std::to_string(s.layers.size()) + " layer states for " +
               std::to_string(lim.num_layers) + " layers");
    const auto n = static_cast<std::int32_t>(s.tokens.size());
    if (n < 1 || (!s.prefill && n != 1))
      seq_fail(std::to_string(n) + " tokens in a " + (s.prefill ? "prefill chunk" : "decode step"));
    const std::int64_t end = static_cast<std::int64_t>(s.start) + n;
    if (s.start < 0 || (s.prefill && end > s.prompt_len))
      seq_fail("chunk [" + std::to_string(s.start) + ", " + std::to_string(end) +
               ") outside the prompt of " + std::to_string(s.prompt_len));
    if (lim.max_positions > 0 && end > lim.max_positions)
      throw InvalidRequest("prompt", seq_where(i, s.seq_id) + "sequence length " +
                                         std::to_string(end) + " exceeds the backend's " +
                                         std::to_string(lim.max_positions) + " positions");
    for (auto t : s.tokens)
      if (t < 0 || t >= lim.vocab_size)
        throw InvalidRequest("prompt", seq_where(i, s.seq_id) + "token id " + std::to_string(t) +
                                           " outside the vocabulary (" +
                                           std::to_string(lim.vocab_size) + ")");
    if (s.sample && (!s.params || !s.output)) seq_fail("sample without params/output");
    step_tokens += n;

    for (std::size_t l = 0; l < s.layers.size(); ++l) {
      const LayerSlots& ls = s.layers[l];
      const LayerRule& r = ls.rule;
      auto fail = [&](const std::string& m) {
        throw InternalError(layer_where(i, s.seq_id, l) + m);
      };
      for (const auto* table : {&ls.pages, &ls.temp_pages})
        for (auto p : *table)
          if (p < 0 || p >= lim.num_pages)
            fail("page id " + std::to_string(p) + " outside the pool of " +
                 std::to_string(lim.num_pages));
      if (r.sparse()) {
        if (r.sinks < 0 || r.window < 1 || r.capacity < r.sinks + r.window + 1 ||
            r.ring != ring_of(r, r.capacity) || r.pool_kernel < 1 || r.pool_kernel % 2 == 0)
          fail("inconsistent sparse rule (capacity " + std::to_string(r.capacity) + ", ring " +
               std::to_string(r.ring) + ", sinks " + std::to_string(r.sinks) + ", window " +
               std::to_string(r.window) + ", pool kernel " + std::to_string(r.pool_kernel) + ")");
        if (ls.ring_pos < 0 || (r.ring > 0 && ls.ring_pos >= r.ring) ||
            (r.ring == 0 && ls.ring_pos != 0))
          fail("ring_pos " + std::to_string(ls.ring_pos) + " outside the ring of " +
               std::to_string(r.ring));
      } else if (ls.action != LayerAction::kNone || !ls.temp_pages.empty()) {
        fail("a full layer takes no sparsity action and no temp pages");
      }
      const bool direct = ls.direct_prefill(s.prompt_len);
      if (ls.action == LayerAction::kSelect && !(s.prefill && !direct))
        fail("kSelect outside the prefill of a prompt longer than the capacity");
      if (ls.action == LayerAction::kShrink && ls.shrink_to <= r.sinks + r.window)
        fail("kShrink to " + std::to_string(ls.shrink_to) +
             " slots (must exceed sinks + window = " + std::to_string(r.sinks + r.window) + ")");

      const auto first_page = static_cast<std::size_t>(s.start / kBlockSize);
      const auto end_page = static_cast<std::size_t>((end - 1) / kBlockSize + 1);
      bool marked_all = false;
      auto mark_all = [&] {
        mark(ls.pages, 0, ls.pages.size(), i, s.seq_id, l);
        marked_all = true;
      };
      if (s.prefill && direct) {
        if (ls.valid != s.start)
          fail("holds " + std::to_string(ls.valid) + " slots, chunk starts at " +
               std::to_string(s.start));
        if (!covers(ls.pages, end))
          fail("page table does not cover slot " + std::to_string(end - 1));
        // A sparse layer rewrites the scores of every slot it holds.
        if (r.sparse())
          mark_all();
        else
          mark(ls.pages, first_page, end_page, i, s.seq_id, l);
      } else if (s.prefill) {
        if (ls.valid != 0)
          fail("holds " + std::to_string(ls.valid) + " slots before its selection");
        if (ls.temp_pages.empty()) {
          if (s.start != 0 || n != s.prompt_len || ls.action != LayerAction::kSelect)
            fail("prompt of " + std::to_string(s.prompt_len) + " exceeds capacity " +
                 std::to_string(r.capacity) + " but the step holds [" + std::to_string(s.start) +
                 ", " + std::to_string(end) +
                 ") without temp pages (scratch needs the whole prompt and kSelect)");
        } else {
          if (!covers(ls.temp_pages, end))
            fail("temp pages do not cover slot " + std::to_string(end - 1));
          mark(ls.temp_pages, first_page, end_page, i, s.seq_id, l);
        }
        if (ls.action == LayerAction::kSelect) {
          if (end != s.prompt_len || n < r.window)
            fail("kSelect needs the chunk ending the prompt, holding its last " +
                 std::to_string(r.window) + " positions (chunk [" + std::to_string(s.start) + ", " +
                 std::to_string(end) + ") of " + std::to_string(s.prompt_len) + ")");
          if (!covers(ls.pages, r.capacity)) fail("page table does not cover the capacity");
          mark_all();
        }
      } else if (!r.sparse()) {
        if (ls.valid != s.start)
          fail("holds " + std::to_string(ls.valid) + " slots, decode at position " +
               std::to_string(s.start));
        if (!covers(ls.pages, static_cast<std::int64_t>(ls.valid) + 1))
          fail("page table does not cover slot " + std::to_string(ls.valid));
        const auto p = static_cast<std::size_t>(ls.valid / kBlockSize);
        mark(ls.pages, p, p + 1, i, s.seq_id, l);
      } else {
        if (ls.valid < 0) fail("negative valid " + std::to_string(ls.valid));
        if (ls.valid > r.capacity && r.policy != Policy::kSnapKv)
          fail("valid " + std::to_string(ls.valid) + " exceeds the capacity " +
               std::to_string(r.capacity));
        if (!covers(ls.pages, std::max(ls.valid, ls.decode_slot() + 1)))
          fail("page table does not cover slot " + std::to_string(ls.decode_slot()));
        // `scored`: the ring's leaver may replace any selected slot; every slot's score moves.
        mark_all();
      }
      if (ls.action == LayerAction::kShrink) {
        LayerSlots post;  // counters only (no table copy)
        post.rule = r;
        post.valid = ls.valid;
        post.ring_pos = ls.ring_pos;
        advance_layer_before_shrink(post, layer_step(s, ls));
        if (!covers(ls.pages, std::min(post.valid, ls.shrink_to)))
          fail("page table does not cover the " +
               std::to_string(std::min(post.valid, ls.shrink_to)) + " slots kShrink keeps");
        if (!marked_all) mark_all();
      }
    }
  }
  if (lim.max_tokens > 0 && step_tokens > lim.max_tokens)
    throw InternalError("step plan: " + std::to_string(step_tokens) +
                        " tokens, the backend runs at most " + std::to_string(lim.max_tokens));
}

}  // namespace strata
