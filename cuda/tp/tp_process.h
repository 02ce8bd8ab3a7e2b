// Tensor-parallel CUDA ranks in separate processes (docs/tensor-parallel.md "Separate
// processes"): one process per GPU, joined by NCCL, driven by rank 0 through the same step
// plans, rank links, proxies and follower loop as the CPU ranks (runtime/tp/tp_remote.h) — only
// the rank backend and its collectives differ (NCCL instead of the TCP data links).
//
// Rank 0 creates the NCCL unique id (make_unique_id) and hands it out through the rendezvous
// (runtime/tp/tp_rendezvous.h); every process then opens the rank links, joins its one-rank
// NcclComm (ncclCommInitRankConfig with the id, its rank and the group size, waiting at most
// --tp-timeout) on its GPU and builds its CudaBackend on its shard. Compiled for sm_90; never
// run (no two-GPU time yet).
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/tp/tp_link.h"
#include "runtime/tp/tp_rendezvous.h"

namespace strata::cuda::tp {

// The CUDA device of rank `rank` when each rank is its own process: backend.devices[rank]
// when the config lists the group's devices (tp_size entries), else rank % the visible device
// count (one process per GPU on one host: rank r on GPU r; give each host's processes
// CUDA_VISIBLE_DEVICES or backend.devices when ranks span hosts). ConfigError if absent.
int process_rank_device(const Config& config, int rank);

// Rank 0's process: its CUDA rank backend (NCCL comm joined with `id`) plus one proxy per
// remote rank, rank 0 first — for the engine or make_tp_group. A remote rank whose process
// goes away mid-step makes the proxy request the abort of rank 0's communicator (its bounded
// wait ends at once); a rank that failed to start is named in the ConfigError.
std::vector<std::unique_ptr<Backend>> make_cuda_tp_process_backends(
    const TpMesh& mesh, const TpUniqueId& id, const Config& config,
    std::chrono::milliseconds timeout);

// Rank r > 0's process: joins, builds its rank backend (a failure is reported to rank 0),
// then follows rank 0's plans until rank 0 stops. Returns the process exit code.
int run_cuda_tp_follower(const TpMesh& mesh, const TpUniqueId& id, const Config& config,
                         std::chrono::milliseconds timeout);

}  // namespace strata::cuda::tp
