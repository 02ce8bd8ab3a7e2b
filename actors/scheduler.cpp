#include "actors/scheduler.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>

#include "runtime/error.h"

namespace strata::actors {
namespace {

struct Buffer {
  std::vector<LayerSlots> layers;
  std::uint64_t serial = 0;
};

// The spare table buffers: each sequence gets the one that held its last export when it is
// there (the export then writes only what changed), others take what is left.
class SpareBuffers {
 public:
  explicit SpareBuffers(std::vector<SpareTables>& v) : v_(v), back_(v.size()) {
    std::sort(v_.begin(), v_.end(),
              [](const SpareTables& a, const SpareTables& b) { return a.seq_id < b.seq_id; });
  }
  Buffer take(std::uint64_t seq_id) {
    auto it =
        std::lower_bound(v_.begin(), v_.end(), seq_id,
                         [](const SpareTables& a, std::uint64_t id) { return a.seq_id < id; });
    if (it != v_.end() && it->seq_id == seq_id && it->serial != kTaken) return take(*it);
    if (carry_) return std::exchange(carry_, Buffer{}).value();
    while (back_ > 0) {
      SpareTables& e = v_[--back_];
      if (e.serial != kTaken) return take(e);
    }
    return Buffer{};
  }
  // A buffer a failed preparation left unchanged: the next sequence without its own takes it.
  void put_back(Buffer b) {
    if (!carry_) carry_ = std::move(b);
  }

 private:
  static constexpr std::uint64_t kTaken = ~std::uint64_t{0};  // (no export has this serial)
  static Buffer take(SpareTables& e) {
    Buffer b{std::move(e.layers), e.serial};
    e.serial = kTaken;
    return b;
  }
  std::vector<SpareTables>& v_;  // sorted by sequence
  std::size_t back_;             // entries past it were taken (or are being)
  std::optional<Buffer> carry_;
};

// The replays' share of the step (lowest priority): what served work left of the budget.
// A step that carries a served prefill chunk carries no replay (159acd3): the replay's tokens
// would lengthen that step and so the served request's time to first token. (Letting replay
// chunks ride only beside served chunks that do not end their prompt would not help: such a
// chunk is cut to take all the budget left, next_chunk_len().) Under sustained load, a served
// prefill in every step, an admitted replay then never progresses; so a running replay that
// got no chunk in in.replays.max_stalled consecutive calls (for that reason or for want of
// budget) is preempted: its seat and pages go back, it is counted as a preempted replay and
// the queue re-admits it, from position 0, when no served request waits and a step has room.
// A replay never holds resources for more than max_stalled steps without progressing.
void schedule_replays(KvCacheManager& cache, const ScheduleInput& in,
                      std::vector<std::uint64_t>& replays, int n_running, int& budget,
                      bool served_prefill, ScheduleOutput& out) {
  const int chunk = std::max(1, in.replays.chunk);
  auto run_chunk = [&](std::uint64_t id) {
    if (served_prefill || budget < 1) return false;
    const int n = cache.next_chunk_len(id, std::min(budget, chunk));
    std::vector<LayerSlots> layers;
    std::uint64_t serial = 0;
    const int start = cache.tokens(id);
    const std::uint64_t base = cache.export_serial(id);
    if (n > 0 && cache.prepare_chunk(id, n, &layers, &serial)) {
      out.steps.push_back({id, true, start, n, std::move(layers), serial, base});
      budget -= n;
      return true;
    }
    return false;
  };
  // Stall counts of the replays still running (those preempted for served work are gone).
  std::vector<std::uint64_t> kept;
  for (std::size_t i = 0; i < in.replays.running.size(); ++i) {
    const auto id = in.replays.running[i];
    if (std::find(replays.begin(), replays.end(), id) == replays.end()) continue;
    const int before = i < in.replays.stalled.size() ? in.replays.stalled[i] : 0;
    // (a replay whose prefill is done waits for its release: nothing to run, nothing stalls)
    const int stalled = cache.prefill_done(id) || run_chunk(id) ? 0 : before + 1;
    if (stalled >= std::max(1, in.replays.max_stalled)) {
      cache.preempt(id);
      out.replays.preempted.push_back(id);
      continue;
    }
    kept.push_back(id);
    out.replays.stalled.emplace_back(id, stalled);
  }
  replays = std::move(kept);
  if (served_prefill) return;
  const auto served_left = static_cast<std::size_t>(std::max(0, in.replays.served_queued));
  if (!out.preempted.empty() || served_left > out.admitted.size() + out.rejected.size()) return;
  for (const auto& c : in.replays.candidates) {
    if (budget < 1 || n_running + static_cast<int>(replays.size()) >= in.limits.max_num_seqs)
      return;
    const AdmitResult ar = cache.can_admit(c.spec);
    if (ar.never_fits) {
      out.replays.rejected.push_back(c.seq_id);
      continue;
    }
    if (!ar.ok || !cache.admit(c.seq_id, c.spec)) return;
    out.replays.admitted.push_back(c.seq_id);
    replays.push_back(c.seq_id);
    out.replays.stalled.emplace_back(c.seq_id, run_chunk(c.seq_id) ? 0 : 1);
  }
}

}  // namespace

ScheduleOutput schedule_step(KvCacheManager& cache, ScheduleInput& in) {
  const auto t0 = std::chrono::steady_clock::now();
  ScheduleOutput out;
  SpareBuffers spares(in.spare_tables);
  for (const auto id : in.commit) {
    if (cache.contains(id)) cache.commit_step(id);
  }
  for (auto& [id, kept] : in.kept) cache.record_kept(id, std::move(kept));
  for (std::size_t i = 0; i < in.release.size(); ++i) {
    const auto id = in.release[i];
    if (!cache.contains(id)) continue;
    out.released.emplace_back(id, cache.usage(id));
    cache.free(id, i < in.release_names.size() ? in.release_names[i].get() : nullptr);
  }

  int budget = in.limits.max_num_batched_tokens;
  bool prefill_scheduled = false;
  std::vector<std::uint64_t> running = in.running;
  // Replays go first when pages or seats are missing (newest first).
  std::vector<std::uint64_t> replays = in.replays.running;
  auto preempt_replay = [&] {
    if (replays.empty()) return false;
    cache.preempt(replays.back());
    out.replays.preempted.push_back(replays.back());
    replays.pop_back();
    return true;
  };

  // Running sequences, oldest first; preemption victims come from the back.
  for (std::size_t i = 0; i < running.size();) {
    const auto id = running[i];
    STRATA_CHECK(cache.contains(id), "running sequence unknown to the cache manager");
    if (cache.prefill_done(id)) {
      if (budget < 1) {
        ++i;
        continue;
      }
      bool self_preempted = false;
      Buffer b = spares.take(id);
      const std::uint64_t base = cache.export_serial(id);
      while (!cache.prepare_decode(id, &b.layers, &b.serial)) {
        if (preempt_replay()) continue;
        const auto victim = running.back();
        cache.preempt(victim);
        out.preempted.push_back(victim);
        running.pop_back();
        if (victim == id) {
          self_preempted = true;
          break;
        }
      }
      if (self_preempted) {
        spares.put_back(std::move(b));
        break;  // it was the newest: nothing after it
      }
      out.steps.push_back({id, false, cache.tokens(id), 1, std::move(b.layers), b.serial, base});
      budget -= 1;
      ++i;
      continue;
    }
    // Still in prefill.
    const int start = cache.tokens(id);
    const int remaining = cache.prompt_len(id) - start;
    int n = 0;
    if (in.limits.chunked_prefill) {
      n = cache.next_chunk_len(id, budget);
    } else if (remaining <= budget || !prefill_scheduled) {
      n = remaining;
    }
    if (n > 0) {
      Buffer b = spares.take(id);
      const std::uint64_t base = cache.export_serial(id);
      if (cache.prepare_chunk(id, n, &b.layers, &b.serial)) {
        out.steps.push_back({id, true, start, n, std::move(b.layers), b.serial, base});
        budget -= n;
        prefill_scheduled = true;
      } else {
        spares.put_back(std::move(b));
      }
    }
    ++i;
  }

  // Admissions.
  int n_running = static_cast<int>(running.size());
  for (const auto& c : in.candidates) {
    if (!out.preempted.empty()) break;
    if (n_running + static_cast<int>(replays.size()) >= in.limits.max_num_seqs) preempt_replay();
    if (n_running >= in.limits.max_num_seqs || budget < 1) break;
    AdmitResult ar;
    try {
      ar = cache.can_admit(c.spec);
      while (!ar.ok && !ar.never_fits && preempt_replay()) ar = cache.can_admit(c.spec);
    } catch (const std::exception& e) {
      out.rejected.emplace_back(c.seq_id, e.what());
      continue;
    }
    if (ar.never_fits) {
      out.rejected.emplace_back(c.seq_id, "the request needs " + std::to_string(ar.need_pages) +
                                              " KV pages, more than the whole pool holds (" +
                                              std::to_string(cache.pool().total()) + ")");
      continue;
    }
    if (!ar.ok) break;
    const int len = c.spec.prompt_len;
    if (!c.spec.chunked && len > budget && prefill_scheduled) break;
    if (!cache.admit(c.seq_id, c.spec)) break;
    out.admitted.push_back(c.seq_id);
    ++n_running;
    const int start = cache.tokens(c.seq_id);  // > 0 after a prefix-cache hit
    out.admitted_cached.push_back(start);
    const int n = c.spec.chunked ? cache.next_chunk_len(c.seq_id, budget) : len - start;
    if (n > 0) {
      Buffer b = spares.take(c.seq_id);
      const std::uint64_t base = cache.export_serial(c.seq_id);
      if (cache.prepare_chunk(c.seq_id, n, &b.layers, &b.serial)) {
        out.steps.push_back({c.seq_id, true, start, n, std::move(b.layers), b.serial, base});
        budget -= n;
        prefill_scheduled = true;
      } else {
        spares.put_back(std::move(b));
      }
    }
  }

  schedule_replays(cache, in, replays, n_running, budget, prefill_scheduled, out);

  out.released_pages = cache.take_released();
  out.stats = cache.stats();
  out.profile_sparse = std::any_of(cache.rules().begin(), cache.rules().end(),
                                   [](const LayerRule& r) { return r.sparse(); });
  if (in.census) out.census = cache.layer_census();
  out.job_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace strata::actors
