#include "api/status_log.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace strata::api {

std::string status_line(const EngineStats& prev, const EngineStats& now, double seconds) {
  const double dt = std::max(seconds, 1e-9);
  const double prompt_tps =
      static_cast<double>(now.prompt_tokens_total - prev.prompt_tokens_total) / dt;
  const double gen_tps =
      static_cast<double>(now.generation_tokens_total - prev.generation_tokens_total) / dt;
  const double inflight = now.timings.inflight_ms - prev.timings.inflight_ms;
  const double device = now.timings.device_ms - prev.timings.device_ms;
  const double overhead = inflight > 0 ? std::max(0.0, 1.0 - device / inflight) : now.host_overhead;
  // Synchronous steps of the interval, by reason (the pipelined loop's, docs/actors.md "Sync
  // steps"; every step is sync_loop with scheduler.async_steps off).
  std::uint64_t sync = 0;
  std::string why;
  for (int r = 1; r < kSyncReasons; ++r) {
    const std::uint64_t n =
        now.sync_steps[static_cast<std::size_t>(r)] - prev.sync_steps[static_cast<std::size_t>(r)];
    if (n == 0) continue;
    sync += n;
    why += (why.empty() ? " (" : ", ") + std::string(to_string(static_cast<SyncReason>(r))) + " " +
           std::to_string(n);
  }
  if (!why.empty()) why += ")";
  char buf[768];
  std::snprintf(
      buf, sizeof buf,
      "strata: engine status: prompt %.1f tok/s, generation %.1f tok/s, running %d, "
      "waiting %d, preempted %d, KV %.1f %% (%d/%d pages), compression %.2fx, host "
      "overhead %.1f %%, steps %llu (decode %llu, mixed %llu, prefill %llu), sync %llu "
      "of %llu steps%s, profile v%llu",
      prompt_tps, gen_tps, now.running, now.waiting, now.preempted, 100.0 * now.kv_usage,
      now.pages_used, now.pages_total, now.compression_ratio, 100.0 * overhead,
      static_cast<unsigned long long>(now.steps), static_cast<unsigned long long>(now.steps_decode),
      static_cast<unsigned long long>(now.steps_mixed),
      static_cast<unsigned long long>(now.steps_prefill), static_cast<unsigned long long>(sync),
      static_cast<unsigned long long>(now.steps - prev.steps), why.c_str(),
      static_cast<unsigned long long>(now.profile_version));
  return buf;
}

bool status_active(const EngineStats& prev, const EngineStats& now) {
  return now.steps != prev.steps || now.prompt_tokens_total != prev.prompt_tokens_total ||
         now.generation_tokens_total != prev.generation_tokens_total || now.running > 0 ||
         now.waiting > 0 || now.preempted > 0;
}

}  // namespace strata::api
