// The CPU backend's ranks in separate processes (docs/tensor-parallel.md "Separate processes"):
// rank backends over TCP collectives (runtime/tp/tcp_comm.h) joined by the
// backend-independent proxies and follower loop of runtime/tp/tp_remote.h.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/tp/tp_link.h"

namespace strata {

// Rank 0's process: its rank backend over TCP collectives (timeout per collective) plus one
// proxy per remote rank, rank 0 first — for the engine or make_tp_group.
std::vector<std::unique_ptr<Backend>> make_cpu_tp_process_backends(
    const TpMesh& mesh, std::shared_ptr<const ModelWeights> weights, const CpuBackendOptions& opts,
    std::chrono::milliseconds timeout);
// Rank r > 0's process: loads its shard of `model_path` (reporting a failure to rank 0),
// then serve_tp_plans. Returns the exit code.
int run_cpu_tp_follower(const TpMesh& mesh, const std::string& model_path,
                        const CpuBackendOptions& opts, std::chrono::milliseconds timeout);

}  // namespace strata
