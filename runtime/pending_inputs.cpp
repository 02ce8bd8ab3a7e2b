#include "runtime/pending_inputs.h"

#include <algorithm>
#include <string>

#include "runtime/backend.h"
#include "runtime/error.h"

namespace strata {

bool resolve_pending_rows(const StepPlan& plan,
                          const std::vector<std::pair<std::uint64_t, std::int32_t>>& sampled,
                          StepPlan& out, std::vector<std::vector<std::int32_t>>& histories,
                          const std::function<std::int32_t(std::size_t, std::int32_t)>& token) {
  std::size_t pending = 0;
  for (const SeqStep& s : plan.seqs) pending += s.input_pending ? 1 : 0;
  if (pending == 0) return false;
  out = plan;
  histories.resize(pending);  // (before any pointer into it is taken)
  std::size_t h = 0;
  for (std::size_t i = 0; i < out.seqs.size(); ++i) {
    SeqStep& s = out.seqs[i];
    if (!s.input_pending) continue;
    auto it = std::lower_bound(sampled.begin(), sampled.end(), s.seq_id,
                               [](const std::pair<std::uint64_t, std::int32_t>& e,
                                  std::uint64_t id) { return e.first < id; });
    STRATA_CHECK(it != sampled.end() && it->first == s.seq_id,
                 "pending input of sequence " + std::to_string(s.seq_id) +
                     ": the previous step sampled nothing for it");
    STRATA_CHECK(!s.prefill && s.tokens.size() == 1 && s.output,
                 "a pending input must be a decode row with an output history");
    const std::int32_t t = token(i, it->second);
    s.tokens[0] = t;
    s.input_pending = false;
    auto& hist = histories[h++];
    hist.assign(s.output->begin(), s.output->end());
    hist.push_back(t);
    s.output = &hist;
  }
  return true;
}

const StepPlan& PendingInputs::resolve(const StepPlan& plan) {
  const bool any = resolve_pending_rows(plan, sampled_, resolved_, histories_,
                                        [](std::size_t, std::int32_t token) { return token; });
  return any ? resolved_ : plan;
}

void PendingInputs::record(const StepPlan& plan, const StepResult& result) {
  sampled_.clear();
  const std::size_t n = std::min(plan.seqs.size(), result.seqs.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (plan.seqs[i].sample && result.seqs[i].token >= 0)
      sampled_.emplace_back(plan.seqs[i].seq_id, result.seqs[i].token);
  }
  std::sort(sampled_.begin(), sampled_.end());
}

// Backend's pipelined defaults (backend.h): run at once, queue the result.
void Backend::submit(const StepPlan& plan) {
  StepResult res;
  try {
    const StepPlan& run = pending_.resolve(plan);
    res = step(run);
  } catch (...) {
    pending_.forget();
    throw;
  }
  pending_.record(plan, res);
  res.stats.sync = SyncReason::kBackend;  // (no overlap: the step ran here, at once)
  finished_.push_back(std::move(res));
}

StepResult Backend::collect() {
  STRATA_CHECK(!finished_.empty(), "collect() without a submitted step");
  StepResult res = std::move(finished_.front());
  finished_.pop_front();
  return res;
}

}  // namespace strata
