#include "runtime/pending_inputs.h"

#include <algorithm>
#include <string>

#include "runtime/backend.h"
#include "runtime/error.h"

namespace strata {

const StepPlan& PendingInputs::resolve(const StepPlan& plan) {
  std::size_t pending = 0;
  for (const SeqStep& s : plan.seqs) pending += s.input_pending ? 1 : 0;
  if (pending == 0) return plan;
  resolved_ = plan;
  histories_.resize(pending);  // (before any pointer into it is taken)
  std::size_t h = 0;
  for (SeqStep& s : resolved_.seqs) {
    if (!s.input_pending) continue;
    auto it = std::lower_bound(sampled_.begin(), sampled_.end(), s.seq_id,
                               [](const std::pair<std::uint64_t, std::int32_t>& e,
                                  std::uint64_t id) { return e.first < id; });
    STRATA_CHECK(it != sampled_.end() && it->first == s.seq_id,
                 "pending input of sequence " + std::to_string(s.seq_id) +
                     ": the previous step sampled nothing for it");
    STRATA_CHECK(!s.prefill && s.tokens.size() == 1 && s.output,
                 "a pending input must be a decode row with an output history");
    s.tokens[0] = it->second;
    s.input_pending = false;
    auto& hist = histories_[h++];
    hist.assign(s.output->begin(), s.output->end());
    hist.push_back(it->second);
    s.output = &hist;
  }
  return resolved_;
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
  finished_.push_back(std::move(res));
}

StepResult Backend::collect() {
  STRATA_CHECK(!finished_.empty(), "collect() without a submitted step");
  StepResult res = std::move(finished_.front());
  finished_.pop_front();
  return res;
}

}  // namespace strata
