#include "runtime/teacher_forcing.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace strata {
namespace {

struct LayerPlan {
  LayerRule rule;
  bool direct = true;  // prompt written position by position (no kSelect)
  int slots = 0;       // most slots the layer ever holds over the whole schedule
  int temp_pages = 0;  // prompt pages of a layer that selects
};

int resolve_prefill(int n, int prefill_len) {
  if (prefill_len < 0 || prefill_len > n)
    throw InvalidRequest("ids", "prefill length " + std::to_string(prefill_len) +
                                    " must be in [1, " + std::to_string(n) +
                                    "] (0: the whole sequence)");
  return prefill_len == 0 ? n : prefill_len;
}

std::vector<LayerPlan> layer_plans(const ModelConfig& model, int n, int prefill,
                                   const SparsityProfile& profile) {
  std::vector<LayerPlan> out;
  for (const auto& rule : profile.resolve(model.num_hidden_layers)) {
    LayerPlan lp;
    lp.rule = rule;
    LayerSlots s;
    s.rule = rule;
    lp.direct = s.direct_prefill(prefill);
    s.valid = lp.direct ? prefill : rule.capacity;
    lp.slots = s.valid;
    lp.temp_pages = lp.direct ? 0 : pages_for_slots(prefill);
    for (int t = prefill; t < n; ++t) {
      lp.slots = std::max(lp.slots, s.decode_slot() + 1);
      s.advance_decode();
    }
    out.push_back(lp);
  }
  return out;
}

}  // namespace

int teacher_forcing_pages(const ModelConfig& model, int num_ids, const SparsityProfile& profile,
                          int prefill_len) {
  if (num_ids <= 0) throw InvalidRequest("ids", "no token ids to run");
  const int prefill = resolve_prefill(num_ids, prefill_len);
  int pages = 0;
  for (const auto& lp : layer_plans(model, num_ids, prefill, profile))
    pages += pages_for_slots(lp.slots) + lp.temp_pages;
  return pages;
}

std::vector<StepPlan> teacher_forcing_plans(const ModelConfig& model,
                                            const std::vector<std::int32_t>& ids,
                                            const SparsityProfile& profile, int prefill_len) {
  if (ids.empty()) throw InvalidRequest("ids", "no token ids to run");
  const int n = static_cast<int>(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= model.vocab_size)
      throw InvalidRequest("ids", "id " + std::to_string(ids[i]) + " at index " +
                                      std::to_string(i) + " is outside the vocabulary [0, " +
                                      std::to_string(model.vocab_size) + ")");
  const int prefill = resolve_prefill(n, prefill_len);
  const auto lps = layer_plans(model, n, prefill, profile);

  // Page ids: every layer's table first (layer order), then the temp pages.
  std::vector<LayerSlots> state(lps.size());
  std::int32_t next_page = 0;
  for (std::size_t l = 0; l < lps.size(); ++l) {
    state[l].rule = lps[l].rule;
    for (int i = 0; i < pages_for_slots(lps[l].slots); ++i) state[l].pages.push_back(next_page++);
  }
  std::vector<std::int32_t> all_temp;
  for (std::size_t l = 0; l < lps.size(); ++l) {
    for (int i = 0; i < lps[l].temp_pages; ++i) {
      state[l].temp_pages.push_back(next_page);
      all_temp.push_back(next_page++);
    }
    if (!lps[l].direct) state[l].action = LayerAction::kSelect;
  }

  std::vector<StepPlan> plans;
  StepPlan first;
  first.step_id = 0;
  SeqStep pre;
  pre.seq_id = 0;
  pre.tokens.assign(ids.begin(), ids.begin() + prefill);
  pre.start = 0;
  pre.prompt_len = prefill;
  pre.prefill = true;
  pre.return_logits = true;
  pre.layers = state;
  first.seqs.push_back(std::move(pre));
  plans.push_back(std::move(first));

  // State after the prefill: the prompt in place, or the selection (valid = C, ring_pos 0).
  for (std::size_t l = 0; l < lps.size(); ++l) {
    state[l].valid = lps[l].direct ? prefill : lps[l].rule.capacity;
    state[l].ring_pos = 0;
    state[l].temp_pages.clear();
    state[l].action = LayerAction::kNone;
  }
  for (int t = prefill; t < n; ++t) {
    StepPlan plan;
    plan.step_id = static_cast<std::uint64_t>(plans.size());
    if (t == prefill) plan.released_pages = all_temp;
    SeqStep dec;
    dec.seq_id = 0;
    dec.tokens = {ids[static_cast<std::size_t>(t)]};
    dec.start = t;
    dec.prompt_len = prefill;
    dec.prefill = false;
    dec.return_logits = true;
    dec.layers = state;
    plan.seqs.push_back(std::move(dec));
    plans.push_back(std::move(plan));
    for (auto& s : state) s.advance_decode();
  }
  return plans;
}

std::vector<float> teacher_forced_logits(Backend& backend, const std::vector<std::int32_t>& ids,
                                         const SparsityProfile& profile, int prefill_len) {
  const ModelConfig& model = backend.model();
  const auto plans = teacher_forcing_plans(model, ids, profile, prefill_len);
  const int pages =
      teacher_forcing_pages(model, static_cast<int>(ids.size()), profile, prefill_len);
  if (pages > backend.info().num_pages)
    throw ConfigError("cache.cpu_kv_bytes",
                      "teacher forcing " + std::to_string(ids.size()) + " tokens needs " +
                          std::to_string(pages) + " KV pages; the " + backend.info().name +
                          " backend has " + std::to_string(backend.info().num_pages));
  const auto vocab = static_cast<std::size_t>(model.vocab_size);
  std::vector<float> logits;
  logits.reserve(ids.size() * vocab);
  for (const auto& plan : plans) {
    auto result = backend.step(plan);
    STRATA_CHECK(result.seqs.size() == 1, "teacher forcing: expected one sequence result");
    auto& row = result.seqs[0].logits;
    const std::size_t want = plan.seqs[0].tokens.size() * vocab;
    STRATA_CHECK(row.size() == want, "teacher forcing: step " + std::to_string(plan.step_id) +
                                         " returned " + std::to_string(row.size()) +
                                         " logits, expected " + std::to_string(want));
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

}  // namespace strata
