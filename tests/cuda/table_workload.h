// A randomized stream of StepPlans from the real cache manager, for the resident page tables
// (cuda/table_store.h): admissions, chunked prefills with selection, decode growth, live profile
// changes that shrink running sequences, preemption by recompute under the same id, aborts,
// steps prepared but never run (their serials unseen by the backend), untracked exports,
// table buffers recycled as the scheduler does, and the plan order shuffled. Tokens are
// teacher-forced (a function of the request and the position), so two backends fed the same
// plans must compute the same bits. Used by tests/cuda/table_store_test.cpp and
// tests/gpu/device_tables_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "cache/kv_cache_manager.h"
#include "cuda/step_layout.h"
#include "runtime/sampling_params.h"
#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata::testutil {

struct WorkloadShape {
  int layers = 4;
  int pages = 600;  // the manager's pool (<= the backend's pages)
  int max_seqs = 8;
  int max_tokens = 256;  // token budget per step
  int max_len = 512;     // positions (max_model_len)
  int vocab = 100;
  int kv_heads = 2, head_dim = 16;
  bool sparse = true;       // a sparse profile with live changes (else the full cache)
  int max_prompt = 140;     // prompt lengths 1 .. max_prompt
  int max_new = 60;         // max_tokens per request 1 .. max_new
  double arrivals = 0.6;    // mean new requests per step
  double drop_step = 0.04;  // a step prepared and never run
};

// The CUDA step planner's limits for a workload of this shape (head_dim 64, 132 SMs, power-of-two
// graph buckets up to max_seqs).
inline cuda::StepLimits step_limits_for(const WorkloadShape& sh) {
  cuda::StepLimits lim;
  lim.num_layers = sh.layers;
  lim.vocab = sh.vocab;
  lim.num_pages = sh.pages;
  lim.scratch_pages = pages_for_slots(sh.max_tokens) + sh.max_seqs;
  lim.max_seqs = sh.max_seqs;
  lim.max_tokens = sh.max_tokens;
  lim.max_table_pages = pages_for_slots(sh.max_len);
  lim.max_tiles = sh.max_tokens / 64 + sh.max_seqs + 1;
  lim.logit_rows = 256;
  lim.kv_heads = sh.kv_heads;
  lim.head_dim = 64;
  lim.num_sms = 132;
  for (int b = 1; b <= sh.max_seqs; b *= 2) lim.graph_buckets.push_back(b);
  return lim;
}

struct WorkloadCounters {
  long steps = 0, dropped = 0, preempted = 0, aborted = 0, shrinks = 0, selects = 0, profiles = 0,
       untracked = 0, shuffled = 0, finished = 0;
};

class TableWorkload {
 public:
  TableWorkload(std::uint64_t seed, WorkloadShape shape)
      : rng_(seed),
        sh_(shape),
        m_(shape.layers, KvLayout{shape.kv_heads, shape.head_dim, 2}, shape.pages,
           profile_for(shape.sparse ? Policy::kSnapKv : Policy::kFull, 40)) {
    greedy_.temperature = 0.0f;
  }

  // The next plan to run (never empty); run it, then call ran().
  const StepPlan& next() {
    for (;;) {
      if (build()) {
        if (chance(sh_.drop_step)) {  // prepared, never run: prepared again next time
          ++c.dropped;
          recycle();
          continue;
        }
        ++c.steps;
        return plan_;
      }
    }
  }

  // The plan returned by next() ran: the manager advances, finished sequences are freed.
  void ran() {
    for (const SeqStep& s : plan_.seqs) {
      Req& r = running_.at(s.seq_id);
      const bool was_prefill = s.prefill;
      m_.commit_step(s.seq_id);
      if (!was_prefill || (m_.prefill_done(s.seq_id) && r.max_new > r.base)) ++r.generated;
      if (m_.prefill_done(s.seq_id) && r.generated >= r.max_new) {
        m_.free(s.seq_id);
        running_.erase(s.seq_id);
        ++c.finished;
      }
    }
    recycle();
  }

  // The token at `pos` of request `id` (prompt and generated alike: teacher forcing).
  int token(std::uint64_t id, int pos) const {
    return static_cast<int>((id * 7919u + static_cast<std::uint64_t>(pos) * 104729u) %
                            static_cast<std::uint64_t>(sh_.vocab));
  }

  KvCacheManager& manager() { return m_; }
  WorkloadCounters c;

 private:
  struct Req {
    std::uint64_t id = 0;
    int prompt = 0, max_new = 0, generated = 0, base = 0;
  };
  struct Buffer {
    std::vector<LayerSlots> layers;
    std::uint64_t serial = 0;
  };

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  SparsityProfile profile_for(Policy pol, int capacity) const {
    SparsityProfile p;
    if (pol == Policy::kFull) return p;  // (disabled: every layer full)
    p.enabled = true;
    p.full_layers = 1;
    p.policy = pol;
    p.capacity = capacity;
    p.window = 4;
    p.sinks = 2;
    return p;
  }

  void arrivals() {
    const int n = std::poisson_distribution<int>(sh_.arrivals)(rng_);
    for (int i = 0; i < n; ++i) {
      Req r;
      r.id = next_id_++;
      r.max_new = pick(1, sh_.max_new);
      r.prompt = std::min(pick(1, sh_.max_prompt), sh_.max_len - r.max_new);
      waiting_.push_back(r);
    }
    while (!waiting_.empty() && static_cast<int>(running_.size()) < sh_.max_seqs) {
      Req r = waiting_.front();
      const SeqSpec spec{r.prompt + r.generated, r.max_new - r.generated, true, {}};
      const AdmitResult ar = m_.can_admit(spec);
      if (ar.never_fits) {
        waiting_.pop_front();
        continue;
      }
      if (!m_.admit(r.id, spec)) return;
      waiting_.pop_front();
      r.base = r.generated;
      running_[r.id] = r;
    }
  }

  void preempt(std::uint64_t id) {
    m_.preempt(id);
    waiting_.push_front(running_.at(id));  // readmitted later under the same id
    running_.erase(id);
    ++c.preempted;
  }

  // Usually the buffer of the sequence's last preparation (the scheduler's habit), else
  // another's or a fresh one.
  Buffer take(std::uint64_t id) {
    auto own = spares_.find(id);
    if (own != spares_.end() && !chance(0.05)) {
      Buffer b = std::move(own->second);
      spares_.erase(own);
      return b;
    }
    if (spares_.empty() || chance(0.2)) return Buffer{};
    auto it = spares_.begin();
    std::advance(it, pick(0, static_cast<int>(spares_.size()) - 1));
    Buffer b = std::move(it->second);
    spares_.erase(it);
    return b;
  }

  // One step's preparations into plan_; false when nothing could run.
  bool build() {
    if (sh_.sparse && chance(0.03)) {  // live change; the same policy shrinks running ones
      const Policy pols[] = {Policy::kSnapKv, Policy::kScored, Policy::kWindow};
      const Policy pol = chance(0.7) ? m_.profile().policy : pols[pick(0, 2)];
      m_.set_profile(profile_for(pol, pick(8, 60)), chance(0.8));
      ++c.profiles;
    }
    arrivals();
    if (!running_.empty() && chance(0.04)) {
      auto it = running_.begin();
      std::advance(it, pick(0, static_cast<int>(running_.size()) - 1));
      m_.free(it->first);
      running_.erase(it);
      ++c.aborted;
    }
    plan_.seqs.clear();
    buffers_.clear();
    int budget = sh_.max_tokens;
    std::vector<std::uint64_t> ids;
    for (const auto& [id, r] : running_) ids.push_back(id);
    std::vector<std::uint64_t> planned;
    for (const std::uint64_t id : ids) {
      if (!running_.count(id) || budget < 1) continue;
      const bool decode = m_.prefill_done(id);
      const int n = decode ? 1 : m_.next_chunk_len(id, budget);
      if (n == 0) continue;
      Buffer b = take(id);
      const std::uint64_t base = m_.export_serial(id);
      const bool untracked = chance(0.03);
      auto prepare = [&] {
        std::uint64_t* serial = untracked ? nullptr : &b.serial;
        if (untracked) b.serial = 0;
        return decode ? m_.prepare_decode(id, &b.layers, serial)
                      : m_.prepare_chunk(id, n, &b.layers, serial);
      };
      bool ok = prepare();
      while (!ok && decode && running_.count(id)) {
        std::uint64_t victim = id;  // the newest not yet planned (or this one)
        for (const auto& [oid, o] : running_)
          if (oid != id && std::find(planned.begin(), planned.end(), oid) == planned.end())
            victim = oid;
        preempt(victim);
        if (victim != id) ok = prepare();
      }
      if (!ok) {
        spares_[id] = std::move(b);
        continue;
      }
      c.untracked += untracked;
      const int start = m_.tokens(id);
      SeqStep s;
      s.seq_id = id;
      s.start = start;
      s.prompt_len = m_.prompt_len(id);  // (after a preemption: prompt + output so far)
      s.prefill = !decode;
      for (int t = 0; t < n; ++t) s.tokens.push_back(token(id, start + t));
      s.sample = decode || start + n == s.prompt_len;
      s.params = s.sample ? &greedy_ : nullptr;
      s.output = s.sample ? &no_output_ : nullptr;
      s.layers = b.layers;  // (the buffer stays with the workload: recycled next step)
      s.table_serial = untracked ? 0 : b.serial;
      s.table_base = base;
      for (const LayerSlots& ls : s.layers) {
        c.shrinks += ls.action == LayerAction::kShrink;
        c.selects += ls.action == LayerAction::kSelect;
      }
      plan_.seqs.push_back(std::move(s));
      buffers_.emplace_back(id, std::move(b));
      planned.push_back(id);
      budget -= n;
    }
    // Preempted sequences may have been planned before their preemption: drop them.
    std::erase_if(plan_.seqs, [&](const SeqStep& s) { return !running_.count(s.seq_id); });
    if (plan_.seqs.empty()) return false;
    if (chance(0.5)) {
      std::shuffle(plan_.seqs.begin(), plan_.seqs.end(), rng_);
      ++c.shuffled;
    }
    plan_.step_id = next_step_++;
    plan_.released_pages = m_.take_released();
    return true;
  }

  void recycle() {
    for (auto& [id, b] : buffers_)
      if (!chance(0.03)) spares_[id] = std::move(b);  // (else lost)
    buffers_.clear();
  }

  std::mt19937_64 rng_;
  WorkloadShape sh_;
  KvCacheManager m_;
  SamplingParams greedy_;
  std::vector<std::int32_t> no_output_;
  std::deque<Req> waiting_;
  std::map<std::uint64_t, Req> running_;
  std::map<std::uint64_t, Buffer> spares_;
  std::vector<std::pair<std::uint64_t, Buffer>> buffers_;  // this step's
  StepPlan plan_;
  std::uint64_t next_id_ = 1, next_step_ = 1;
};

}  // namespace strata::testutil
