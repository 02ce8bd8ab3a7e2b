#include "runtime/cpu/tp_process.h"

#include "runtime/tp/tcp_comm.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/tp/tp_remote.h"

namespace strata {

std::vector<std::unique_ptr<Backend>> make_cpu_tp_process_backends(
    const TpMesh& mesh, std::shared_ptr<const ModelWeights> weights, const CpuBackendOptions& opts,
    std::chrono::milliseconds timeout) {
  if (mesh.rank != 0) throw InternalError("make_cpu_tp_process_backends: not rank 0");
  auto comm = std::make_shared<cpu::TcpComm>(0, mesh.size, mesh.data, timeout);
  return make_tp_process_backends(
      mesh, make_cpu_tp_rank_backend(std::move(weights), opts, 0, comm),
      [comm](const std::string& why) { comm->abort(why); }, [comm] { return comm->aborted(); });
}

int run_cpu_tp_follower(const TpMesh& mesh, const std::string& model_path,
                        const CpuBackendOptions& opts, std::chrono::milliseconds timeout) {
  return run_tp_follower(mesh, [&]() -> std::unique_ptr<Backend> {
    auto comm = std::make_shared<cpu::TcpComm>(mesh.rank, mesh.size, mesh.data, timeout);
    return make_cpu_tp_rank_backend(ModelWeights::load(model_path), opts, mesh.rank, comm);
  });
}

}  // namespace strata
