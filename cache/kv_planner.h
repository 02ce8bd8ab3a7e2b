// Memory planner: how many pages a sequence needs under a per-layer sparsity rule set, how
// many sequences of a shape fit a byte budget, and the compression a rule set gives.
// Pure functions of (rules, lengths); the cache manager (cache/kv_cache_manager.h) uses the
// same arithmetic for admission, so plans and admissions agree exactly.
//
// Lengths: `prompt_len` prompt tokens, `max_tokens` tokens to generate. The last generated
// token is never fed back, so a sequence writes at most prompt_len + max_tokens - 1 KV
// positions (`decode_writes(max_tokens)` = max_tokens - 1 decode steps after the prefill).
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/kv_layout.h"
#include "runtime/sparsity_profile.h"

namespace strata {

inline int decode_writes(int max_tokens) {
  return max_tokens > 0 ? max_tokens - 1 : 0;
}

// Pages of one layer of one sequence over its life.
struct LayerPagePlan {
  int temp = 0;     // temporary prefill pages (sparse layer, prompt > C_l, chunked prefill)
  int prefill = 0;  // pages of the layer's own table at the end of the prefill
  int final = 0;    // pages of the layer's own table after every decode write
  // What admission reserves for this layer: temp + the most the table will hold
  // (full layers: the prompt only; their decode growth is not reserved, see kv_cache_manager.h).
  int reserve = 0;
};

LayerPagePlan plan_layer(const LayerRule& rule, int prompt_len, int max_tokens, bool chunked);

struct PagePlan {
  int admission = 0;     // pages reserved at admission (sum of LayerPagePlan::reserve)
  int prefill_peak = 0;  // pages held during the step that ends the prompt (temp + tables)
  int final = 0;         // pages held after the last decode write
  int peak = 0;          // max(prefill_peak, final): the most the sequence ever holds
  std::vector<int> per_layer_final;
};

// `chunked`: the prompt may be split over several steps (then sparse layers with
// prompt_len > C_l hold the prompt in temporary pages); false: the whole prompt runs in one
// step and the backend's scratch holds it.
PagePlan pages_needed(int prompt_len, int max_tokens, const std::vector<LayerRule>& rules,
                      bool chunked = true);

// Sequences of this shape that fit `budget_bytes` of pages (`page_bytes` each) at the same
// time, each at its peak. Returns 0 when not even one fits.
long max_sequences(std::size_t budget_bytes, std::size_t page_bytes, int prompt_len, int output_len,
                   const std::vector<LayerRule>& rules, bool chunked = true);

// Token slots one layer holds once `tokens` positions of a sequence with `prompt_len` prompt
// tokens are in the cache (tokens >= prompt_len): full: tokens; window/scored:
// min(tokens, C_l); snapkv: min(prompt_len, C_l) + (tokens - prompt_len).
long kept_slots(const LayerRule& rule, int prompt_len, int tokens);

// Compression (token-layer, i.e. slot, based): full-cache slots (layers x tokens) / slots
// held. Default Llama-3-8B profile at 4000 + 500 tokens: 144,000 / 28,348 = 5.08.
double compression_ratio(const std::vector<LayerRule>& rules, int prompt_len, int tokens);

}  // namespace strata
