// The periodic one-line engine status (server.status_log_interval_s), an operator's view in the
// log like vLLM's "Avg prompt throughput: ..." line. Pure: the server's I/O thread calls it
// with two EngineStats snapshots `seconds` apart (api/server.cpp, status_log_loop).
#pragma once

#include <string>

#include "actors/engine_stats.h"

namespace strata::api {

// "strata: engine status: prompt 812.4 tok/s, generation 96.0 tok/s, running 3, waiting 0,
// preempted 0, KV 12.5 % (40/320 pages), compression 3.21x, host overhead 4.2 %, steps 1234
// (decode 1100, mixed 120, prefill 14), sync 3 of 412 steps (return_logits 3), profile v2".
// Throughputs, host overhead and the synchronous steps by reason (EngineStats::sync_steps) are
// over the interval (host overhead: the time a step was in flight, StepTimings::inflight_ms, not
// covered by device work; the cumulative share when no step ran); the rest is `now`.
std::string status_line(const EngineStats& prev, const EngineStats& now, double seconds);

// Whether the interval saw work (tokens, steps) or requests are in the engine: idle intervals
// after the first idle line are not logged.
bool status_active(const EngineStats& prev, const EngineStats& now);

}  // namespace strata::api
