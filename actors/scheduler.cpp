#include "actors/scheduler.h"

#include <algorithm>
#include <chrono>

#include "runtime/error.h"

namespace strata::actors {

ScheduleOutput schedule_step(KvCacheManager& cache, ScheduleInput& in) {
  const auto t0 = std::chrono::steady_clock::now();
  ScheduleOutput out;
  // One table buffer per prepared sequence: a spare one when there is one. A failed
  // prepare_*() leaves the buffer for the next sequence.
  std::vector<LayerSlots> layers;
  auto next_buffer = [&] {
    if (in.spare_layers.empty()) return;
    layers = std::move(in.spare_layers.back());
    in.spare_layers.pop_back();
  };
  next_buffer();
  for (const auto id : in.commit) {
    if (cache.contains(id)) cache.commit_step(id);
  }
  for (const auto id : in.release) {
    if (!cache.contains(id)) continue;
    out.released.emplace_back(id, cache.usage(id));
    cache.free(id);
  }

  int budget = in.limits.max_num_batched_tokens;
  bool prefill_scheduled = false;
  std::vector<std::uint64_t> running = in.running;

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
      while (!cache.prepare_decode(id, &layers)) {
        const auto victim = running.back();
        cache.preempt(victim);
        out.preempted.push_back(victim);
        running.pop_back();
        if (victim == id) {
          self_preempted = true;
          break;
        }
      }
      if (self_preempted) break;  // it was the newest: nothing after it
      out.steps.push_back({id, false, cache.tokens(id), 1, std::move(layers)});
      next_buffer();
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
    if (n > 0 && cache.prepare_chunk(id, n, &layers)) {
      out.steps.push_back({id, true, start, n, std::move(layers)});
      next_buffer();
      budget -= n;
      prefill_scheduled = true;
    }
    ++i;
  }

  // Admissions.
  int n_running = static_cast<int>(running.size());
  for (const auto& c : in.candidates) {
    if (!out.preempted.empty()) break;
    if (n_running >= in.limits.max_num_seqs || budget < 1) break;
    AdmitResult ar;
    try {
      ar = cache.can_admit(c.spec);
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
    const int n = c.spec.chunked ? cache.next_chunk_len(c.seq_id, budget) : len;
    if (n > 0 && cache.prepare_chunk(c.seq_id, n, &layers)) {
      out.steps.push_back({c.seq_id, true, 0, n, std::move(layers)});
      next_buffer();
      budget -= n;
      prefill_scheduled = true;
    }
  }

  out.released_pages = cache.take_released();
  out.stats = cache.stats();
  out.job_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace strata::actors
