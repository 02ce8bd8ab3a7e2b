// Tensor-parallel ranks in separate processes (docs/tensor-parallel.md "Separate processes").
// Rank 0's process runs the engine with one local rank backend plus, per remote rank, a
// proxy Backend that forwards each StepPlan over the rank's control link (runtime/tp/tp_link.h,
// runtime/tp/tp_wire.h) and returns the seq ids once the rank replied — so the engine, its
// RankExecutors and make_tp_group are unchanged. A rank r > 0 process runs the follower loop:
// receive a plan, run it on its rank backend, reply; stop when rank 0 says so or goes away.
// The collectives between the ranks are the backend's own (CPU: runtime/tp/tcp_comm.h, with
// the CPU ranks' glue in runtime/cpu/tp_process.h).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/tp/tp_link.h"

namespace strata {

// Follower: tells rank 0 its backend is built (num_pages, model shape) or why it is not.
void tp_send_ready(TpLink& control, const Backend& backend);
void tp_send_ready_error(TpLink& control, const std::string& why);

// Rank 0: waits for rank `rank`'s ready message (no time limit: loading may take long; a
// closed connection or a reported failure throws ConfigError naming the rank; a different
// model shape or page count than `local`'s too) and returns its proxy. `abort_group` is
// called when the rank's process is gone (or reports that its communicator failed) (so rank 0's own
// collectives stop waiting); `group_aborted` says whether the group already failed (the proxy then
// waits at most 10 s more for the rank's answer). A rank that answers with an error fails the step
// with it; the proxy sends a stop when destroyed. `equal_pages`: refuse a KV page count other than
// `local`'s (CPU: the pools follow the config); without it the proxy reports the rank's own count
// and the engine uses the smallest (CUDA: pools follow free memory).
std::unique_ptr<Backend> make_remote_rank(int rank, std::shared_ptr<TpLink> control,
                                          const Backend& local,
                                          std::function<void(const std::string&)> abort_group,
                                          std::function<bool()> group_aborted,
                                          bool equal_pages = true);

// Follower loop on `backend` (rank `rank`). Returns the process exit code: 0 after rank 0's
// stop, or when rank 0 closed the connection between steps; 1 when rank 0 vanished after a
// failed step (mid-step) or sent something that is not a plan. Prints what happened to stderr.
// `group_failed` (optional) says after a failed step whether the rank's communicator failed
// with it; the reply tells rank 0, whose proxy then aborts rank 0's group (abort_group).
int serve_tp_plans(Backend& backend, TpLink& control, int rank,
                   const std::function<bool()>& group_failed = {});

// A follower's rank backend whose steps are watched: while a step runs, rank 0 sends nothing
// on the control link unless its group failed (the proxy's abort message) or rank 0 went away
// (the connection closes); either makes a watcher thread call `abort` (e.g. the CUDA rank's
// NcclComm::request_abort), so the step's collectives end at once instead of after their
// timeout. Between steps the link is left to serve_tp_plans.
std::unique_ptr<Backend> watch_tp_steps(std::unique_ptr<Backend> inner, TpLink& control,
                                        std::function<void(const std::string&)> abort);

// The backend-independent glue (the CPU ranks, runtime/cpu/tp_process.h, and the CUDA ranks
// use it). Rank 0's process: its own rank backend `local` plus one proxy per remote rank
// (make_remote_rank with the callbacks), rank 0 first — for the engine or make_tp_group.
std::vector<std::unique_ptr<Backend>> make_tp_process_backends(
    const TpMesh& mesh, std::unique_ptr<Backend> local,
    const std::function<void(const std::string&)>& abort_group,
    const std::function<bool()>& group_aborted, bool equal_pages = true);
// Rank r > 0's process: `build` makes the rank backend (a failure is sent to rank 0 as the
// rank's ready error and rethrown), then ready and serve_tp_plans. Returns the exit code.
int run_tp_follower(const TpMesh& mesh, const std::function<std::unique_ptr<Backend>()>& build,
                    const std::function<bool()>& group_failed = {});
// Rank 0 after its own start-up failed (e.g. its NCCL join timed out because a rank never
// joined): the first start-up error a remote rank reported meanwhile ("rank 2 failed to
// start: ..."), waiting at most `wait` per rank; empty when none did.
std::string tp_remote_start_error(const TpMesh& mesh, std::chrono::milliseconds wait);

}  // namespace strata
