#include "cuda/tp/tp_process.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "cuda/tp/nccl_comm.h"
#include "cuda/tp/tp_backends.h"
#include "runtime/error.h"
#include "runtime/tp/tp_remote.h"

namespace strata::cuda::tp {

int process_rank_device(const Config& config, int rank) {
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible < 1)
    throw ConfigError("backend.kind", "rank " + std::to_string(rank) + " sees no CUDA device");
  const auto& d = config.backend.devices;
  const int dev = d.empty() ? rank % visible : d.at(static_cast<std::size_t>(rank));
  if (dev < 0 || dev >= visible)
    throw ConfigError("backend.devices", "rank " + std::to_string(rank) + ": CUDA device " +
                                             std::to_string(dev) + " not present (" +
                                             std::to_string(visible) + " visible)");
  return dev;
}

std::vector<std::unique_ptr<Backend>> make_cuda_tp_process_backends(
    const TpMesh& mesh, const TpUniqueId& id, const Config& config,
    std::chrono::milliseconds timeout) {
  if (mesh.rank != 0) throw InternalError("make_cuda_tp_process_backends: not rank 0");
  NcclRank local;
  try {
    const int dev = process_rank_device(config, 0);
    std::fprintf(stderr, "tensor parallel: rank 0 of %d joining NCCL on CUDA device %d\n",
                 mesh.size, dev);
    // Until every rank has joined, nothing but a start-up error (or a closed connection) can
    // arrive on a control link: a follower sends its ready only after its join and its
    // backend. Either ends rank 0's join at once instead of after the timeout.
    local = make_nccl_rank(config, id, 0, mesh.size, dev, timeout, [&mesh] {
      for (int r = 1; r < mesh.size; ++r)
        if (mesh.control[static_cast<std::size_t>(r)]->has_data()) return true;
      return false;
    });
  } catch (const std::exception& e) {
    // A rank that failed to start keeps the NCCL join from completing: name it if it said so.
    const std::string remote = tp_remote_start_error(mesh, std::chrono::seconds(2));
    if (!remote.empty())
      throw ConfigError("backend.tp_size", remote + " (rank 0: " + e.what() + ")");
    throw;
  }
  auto comm = local.comm;
  return make_tp_process_backends(
      mesh, std::move(local.backend), [comm](const std::string& why) { comm->request_abort(why); },
      [comm] { return comm->aborted(); }, /*equal_pages=*/false);
}

int run_cuda_tp_follower(const TpMesh& mesh, const TpUniqueId& id, const Config& config,
                         std::chrono::milliseconds timeout) {
  std::shared_ptr<NcclComm> comm;
  return run_tp_follower(
      mesh,
      [&]() -> std::unique_ptr<Backend> {
        const int dev = process_rank_device(config, mesh.rank);
        std::fprintf(stderr, "tensor parallel: rank %d of %d joining NCCL on CUDA device %d\n",
                     mesh.rank, mesh.size, dev);
        // Rank 0 sends nothing before the first plan: a readable control link while joining
        // means rank 0 went away.
        auto r = make_nccl_rank(config, id, mesh.rank, mesh.size, dev, timeout,
                                [&mesh] { return mesh.control[0]->has_data(); });
        comm = r.comm;
        auto c = r.comm;
        return watch_tp_steps(std::move(r.backend), *mesh.control[0],
                              [c](const std::string& why) { c->request_abort(why); });
      },
      [&] { return comm && comm->aborted(); });
}

}  // namespace strata::cuda::tp
