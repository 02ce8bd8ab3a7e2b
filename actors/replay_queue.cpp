#include "actors/replay_queue.h"

#include <algorithm>

#include "runtime/error.h"

namespace strata::actors {

bool ReplayQueue::sample() {
  if (rate_ <= 0) return false;
  credit_ += rate_;
  if (credit_ < 1.0 - 1e-9) return false;
  credit_ = std::max(0.0, credit_ - 1.0);
  return true;
}

bool ReplayQueue::push(std::uint64_t id, std::shared_ptr<const ReplayRecord> rec) {
  if (static_cast<int>(q_.size()) >= max_) return false;
  STRATA_CHECK(rec && !rec->prompt.empty() && !rec->output.empty() &&
                   rec->argmax.size() == rec->output.size() &&
                   rec->logprob.size() == rec->output.size(),
               "replay record without a prompt or with unmatched per-token records");
  Replay r;
  r.id = id;
  r.tokens = rec->replay_tokens();
  r.next_pos = rec->first_scored();
  r.rec = std::move(rec);
  q_.push_back(std::move(r));
  return true;
}

bool ReplayQueue::owns(std::uint64_t id) const {
  for (const auto& r : q_) {  // the running ones are at the front
    if (!r.running) return false;
    if (r.id == id) return true;
  }
  return false;
}

const ReplayQueue::Replay* ReplayQueue::find(std::uint64_t id) const {
  for (const auto& r : q_)
    if (r.id == id) return &r;
  return nullptr;
}
ReplayQueue::Replay* ReplayQueue::find(std::uint64_t id) {
  for (auto& r : q_)
    if (r.id == id) return &r;
  return nullptr;
}

std::vector<std::uint64_t> ReplayQueue::running() const {
  std::vector<std::uint64_t> v;
  for (const auto& r : q_)
    if (r.running) v.push_back(r.id);
  return v;
}

std::vector<int> ReplayQueue::stalled() const {
  std::vector<int> v;
  for (const auto& r : q_)
    if (r.running) v.push_back(r.stalled);
  return v;
}

void ReplayQueue::set_stalled(std::uint64_t id, int stalled) {
  if (Replay* r = find(id)) r->stalled = stalled;
}

std::vector<Candidate> ReplayQueue::candidates() const {
  if (q_.empty() || q_.front().running) return {};
  Candidate c;
  c.seq_id = q_.front().id;
  c.spec.prompt_len = static_cast<int>(q_.front().tokens.size());
  c.spec.max_tokens = 1;  // (never decodes: the last chunk ends the replay)
  c.spec.chunked = true;
  c.spec.sparsity = SparsityProfile{};  // the full cache: sparsity off
  return {c};
}

void ReplayQueue::admitted(std::uint64_t id) {
  if (Replay* r = find(id)) r->running = true;
}

void ReplayQueue::preempted(std::uint64_t id) {
  auto it = std::find_if(q_.begin(), q_.end(), [&](const Replay& r) { return r.id == id; });
  if (it == q_.end()) return;
  Replay r = std::move(*it);
  q_.erase(it);
  r.running = false;
  r.stalled = 0;
  q_.push_front(std::move(r));  // first in line again
}

void ReplayQueue::fill(SeqStep& st, PreparedSeq& p) const {
  const Replay* r = find(p.seq_id);
  STRATA_CHECK(r, "replay step for an unknown replay");
  std::vector<std::int32_t> tokens = std::move(st.tokens);  // (keeps its capacity)
  st = SeqStep{};
  st.seq_id = p.seq_id;
  st.prefill = true;
  st.start = p.start;
  st.prompt_len = static_cast<int>(r->tokens.size());
  tokens.assign(r->tokens.begin() + p.start, r->tokens.begin() + p.start + p.n_tokens);
  st.tokens = std::move(tokens);
  st.sample = false;
  st.return_logits = p.start + p.n_tokens > r->next_pos;
  st.layers = std::move(p.layers);
  st.table_serial = p.serial;
  st.table_base = p.base;
  st.params = &r->rec->params;
  st.prompt = &r->rec->prompt;
}

ReplayQueue::Completed ReplayQueue::completed(const SeqStep& st, std::vector<float> logits) {
  Completed c;
  Replay* r = find(st.seq_id);
  if (!r) return c;
  const int end = st.start + static_cast<int>(st.tokens.size());
  if (st.return_logits && end > r->next_pos) {
    ReplayRowsMsg m;
    m.replay_id = r->id;
    m.rec = r->rec;
    m.first_pos = st.start;
    m.logits = std::move(logits);
    c.rows = std::move(m);
    r->next_pos = end;
  }
  if (end == static_cast<int>(r->tokens.size())) {
    c.finished = true;
    if (c.rows) c.rows->last = true;
    drop(r->id);
  }
  return c;
}

bool ReplayQueue::drop(std::uint64_t id) {
  auto it = std::find_if(q_.begin(), q_.end(), [&](const Replay& r) { return r.id == id; });
  if (it == q_.end()) return false;
  const bool held = it->running;
  q_.erase(it);
  return held;
}

std::vector<std::uint64_t> ReplayQueue::clear() {
  auto v = running();
  q_.clear();
  return v;
}

}  // namespace strata::actors
