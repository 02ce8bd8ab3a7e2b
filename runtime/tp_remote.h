// Tensor-parallel ranks in separate processes (docs/tensor-parallel.md "Separate processes").
// Rank 0's process runs the engine with one local rank backend plus, per remote rank, a
// proxy Backend that forwards each StepPlan over the rank's control link (runtime/tp_link.h,
// runtime/tp_wire.h) and returns the seq ids once the rank replied — so the engine, its
// RankExecutors and make_tp_group are unchanged. A rank r > 0 process runs the follower loop:
// receive a plan, run it on its rank backend, reply; stop when rank 0 says so or goes away.
// The collectives between the ranks are the backend's own (CPU: runtime/cpu/tcp_comm.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu_backend.h"
#include "runtime/tp_link.h"

namespace strata {

// Follower: tells rank 0 its backend is built (num_pages, model shape) or why it is not.
void tp_send_ready(TpLink& control, const Backend& backend);
void tp_send_ready_error(TpLink& control, const std::string& why);

// Rank 0: waits for rank `rank`'s ready message (no time limit: loading may take long; a
// closed connection or a reported failure throws ConfigError naming the rank; a different
// model shape or page count than `local`'s too) and returns its proxy. `abort_group` is
// called when the rank's process is gone (so rank 0's own collectives stop waiting);
// `group_aborted` says whether the group already failed (the proxy then waits at most
// 10 s more for the rank's answer). A rank that answers with an error fails the step with
// it; the proxy sends a stop when destroyed.
std::unique_ptr<Backend> make_remote_rank(int rank, std::shared_ptr<TpLink> control,
                                          const Backend& local,
                                          std::function<void(const std::string&)> abort_group,
                                          std::function<bool()> group_aborted);

// Follower loop on `backend` (rank `rank`). Returns the process exit code: 0 after rank 0's
// stop, or when rank 0 closed the connection between steps; 1 when rank 0 vanished after a
// failed step (mid-step) or sent something that is not a plan. Prints what happened to stderr.
int serve_tp_plans(Backend& backend, TpLink& control, int rank);

// The CPU glue. Rank 0's process: its rank backend over TCP collectives (timeout per
// collective) plus one proxy per remote rank, rank 0 first — for the engine or make_tp_group.
std::vector<std::unique_ptr<Backend>> make_cpu_tp_process_backends(
    const TpMesh& mesh, std::shared_ptr<const ModelWeights> weights, const CpuBackendOptions& opts,
    std::chrono::milliseconds timeout);
// Rank r > 0's process: loads its shard of `model_path` (reporting a failure to rank 0),
// then serve_tp_plans. Returns the exit code.
int run_cpu_tp_follower(const TpMesh& mesh, const std::string& model_path,
                        const CpuBackendOptions& opts, std::chrono::milliseconds timeout);

}  // namespace strata
