#include "cache/kv_planner.h"

#include <algorithm>

#include "runtime/error.h"
#include "runtime/kv_layout.h"

namespace strata {

LayerPagePlan plan_layer(const LayerRule& rule, int prompt_len, int max_tokens, bool chunked) {
  if (prompt_len < 1) throw InvalidRequest("prompt", "prompt_len must be >= 1");
  if (max_tokens < 0) throw InvalidRequest("max_tokens", "must be >= 0");
  const int d = decode_writes(max_tokens);
  LayerPagePlan p;
  if (!rule.sparse()) {
    p.prefill = pages_for_slots(prompt_len);
    p.final = pages_for_slots(prompt_len + d);
    p.reserve = p.prefill;  // decode growth of full layers is not reserved
    return p;
  }
  const int c = rule.capacity;
  if (chunked && prompt_len > c) p.temp = pages_for_slots(prompt_len);
  p.prefill = pages_for_slots(std::min(prompt_len, c));
  if (rule.policy == Policy::kSnapKv) {
    p.final = pages_for_slots(std::min(prompt_len, c) + d);
  } else {  // window, scored: fixed capacity
    p.final = pages_for_slots(std::min(prompt_len + d, c));
  }
  p.reserve = p.temp + p.final;
  return p;
}

PagePlan pages_needed(int prompt_len, int max_tokens, const std::vector<LayerRule>& rules,
                      bool chunked) {
  PagePlan plan;
  plan.per_layer_final.reserve(rules.size());
  for (const auto& r : rules) {
    const auto lp = plan_layer(r, prompt_len, max_tokens, chunked);
    plan.admission += lp.reserve;
    plan.prefill_peak += lp.temp + lp.prefill;
    plan.final += lp.final;
    plan.per_layer_final.push_back(lp.final);
  }
  plan.peak = std::max(plan.prefill_peak, plan.final);
  return plan;
}

long max_sequences(std::size_t budget_bytes, std::size_t page_bytes, int prompt_len, int output_len,
                   const std::vector<LayerRule>& rules, bool chunked) {
  if (page_bytes == 0) throw InternalError("max_sequences: page_bytes is 0");
  const auto plan = pages_needed(prompt_len, output_len, rules, chunked);
  if (plan.peak == 0) return 0;
  const auto pages = static_cast<long>(budget_bytes / page_bytes);
  return pages / plan.peak;
}

long kept_slots(const LayerRule& rule, int prompt_len, int tokens) {
  if (!rule.sparse()) return tokens;
  if (rule.policy == Policy::kSnapKv)
    return std::min(prompt_len, rule.capacity) + std::max(0, tokens - prompt_len);
  return std::min(tokens, rule.capacity);
}

double compression_ratio(const std::vector<LayerRule>& rules, int prompt_len, int tokens) {
  long held = 0;
  for (const auto& r : rules) held += kept_slots(r, prompt_len, tokens);
  if (held == 0) return 1.0;
  return static_cast<double>(rules.size()) * tokens / static_cast<double>(held);
}

}  // namespace strata
