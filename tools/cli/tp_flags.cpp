#include "tools/cli/tp_flags.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "runtime/cpu/tp_process.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/tp/tp_link.h"
#include "runtime/tp/tp_remote.h"

#if defined(STRATA_WITH_CUDA) && __has_include("cuda/tp/tp_process.h") && \
                                               __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>

#include "cuda/tp/nccl_comm.h"
#include "cuda/tp/tp_process.h"
#define STRATA_TP_CUDA 1
#endif

namespace strata::cli {
namespace {
std::chrono::milliseconds timeout_of(const TpFlags& f) {
  return std::chrono::milliseconds(static_cast<long long>(f.timeout_s * 1000));
}
}  // namespace

TpFlags read_tp_flags(const Args& a, Config& config) {
  TpFlags f;
  f.size = config.backend.tp_size;
  if (a.get("tp-size")) {
    const auto n = a.get_int("tp-size", 1);
    if (n < 1 || n > 64)
      throw ConfigError("--tp-size", "must be in [1, 64], got " + std::to_string(n));
    f.size = static_cast<int>(n);
  }
  if (a.get("tp-timeout")) {
    f.timeout_s = a.get_double("tp-timeout", 120);
    if (!(f.timeout_s > 0)) throw ConfigError("--tp-timeout", "must be > 0 seconds");
  }
  const bool has_rank = a.get("tp-rank").has_value(), has_master = a.get("tp-master").has_value();
  if (has_rank != has_master)
    throw ConfigError(has_rank ? "--tp-master" : "--tp-rank",
                      "multi-process tensor parallelism needs both --tp-rank and --tp-master");
  if (has_rank) {
    const auto r = a.get_int("tp-rank", 0);
    if (f.size < 2) throw ConfigError("--tp-size", "--tp-rank needs --tp-size >= 2");
    if (r < 0 || r >= f.size)
      throw ConfigError("--tp-rank",
                        std::to_string(r) + " outside [0, " + std::to_string(f.size) + ")");
    f.rank = static_cast<int>(r);
    f.master = parse_tp_endpoint(*a.get("tp-master"));
    if (f.master->port == 0) throw ConfigError("--tp-master", "needs a port other than 0");
  }
  config.backend.tp_size = f.size;
  config.validate();
  return f;
}

bool tp_use_cuda(const Config& config, bool auto_gpu) {
  const bool asked = config.backend.kind == "cuda";
#ifdef STRATA_TP_CUDA
  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  if (asked && !gpu)
    throw ConfigError("backend.kind", "cuda requested but no CUDA device is visible");
  return asked || (auto_gpu && config.backend.kind == "auto" && gpu);
#else
  (void)auto_gpu;
  if (asked)
    throw ConfigError("backend.kind", "cuda requested but this binary was built without CUDA");
  return false;
#endif
}

TpUniqueId tp_rendezvous_from_flags(const TpFlags& f, bool cuda) {
  if (!f.rank || !f.master) throw InternalError("tp_rendezvous_from_flags: not multi-process");
  const auto timeout = timeout_of(f);
  if (*f.rank > 0) {
    std::fprintf(stderr, "tensor parallel: rank %d of %d joining %s:%u\n", *f.rank, f.size,
                 f.master->host.c_str(), f.master->port);
    return tp_rendezvous_join(*f.master, *f.rank, f.size, timeout);
  }
  // The NCCL unique id for CUDA ranks; opaque random bytes (unused) for CPU ranks.
  TpUniqueId id;
#ifdef STRATA_TP_CUDA
  if (cuda) id = cuda::tp::make_unique_id();
#endif
  if (!cuda) {
    std::random_device rd;
    for (auto& b : id) b = static_cast<std::uint8_t>(rd());
  }
  std::fprintf(stderr, "tensor parallel: rank 0 of %d waiting for %d rank(s) on %s:%u\n", f.size,
               f.size - 1, f.master->host.c_str(), f.master->port);
  tp_rendezvous_serve(*f.master, f.size, id, timeout);
  return id;
}

BackendFactory tp_rank0_factory(const TpFlags& f, bool cuda) {
  if (!f.rank || *f.rank != 0 || !f.master) throw InternalError("tp_rank0_factory: not rank 0");
  return [f, cuda](const Config& config) {
    const TpUniqueId id = tp_rendezvous_from_flags(f, cuda);
    const auto at = tp_link_endpoint(*f.master);
    std::fprintf(stderr, "tensor parallel: rank 0 waiting for the rank links on %s:%u\n",
                 at.host.c_str(), at.port);
    const auto mesh = tp_mesh_accept(at, f.size, timeout_of(f));
    std::vector<std::unique_ptr<Backend>> backends;
    (void)id;  // the CPU ranks do not use it
#ifdef STRATA_TP_CUDA
    if (cuda) backends = cuda::tp::make_cuda_tp_process_backends(mesh, id, config, timeout_of(f));
#endif
    if (!cuda)
      backends = make_cpu_tp_process_backends(mesh, ModelWeights::load(config.model.path),
                                              cpu_backend_options(config), timeout_of(f));
    std::fprintf(stderr, "tensor parallel: rank 0 of %d ready (%s), %d remote rank(s) joined\n",
                 f.size, cuda ? "cuda" : "cpu", f.size - 1);
    return backends;
  };
}

int tp_follower_main(const TpFlags& f, const Config& config, bool cuda) {
  if (!f.rank || *f.rank < 1 || !f.master) throw InternalError("tp_follower_main: not rank > 0");
  const TpUniqueId id = tp_rendezvous_from_flags(f, cuda);
  const auto mesh = tp_mesh_connect(tp_link_endpoint(*f.master), *f.rank, f.size, timeout_of(f));
#ifdef STRATA_TP_CUDA
  if (cuda) return cuda::tp::run_cuda_tp_follower(mesh, id, config, timeout_of(f));
#endif
  (void)id;
  return run_cpu_tp_follower(mesh, config.model.path, cpu_backend_options(config), timeout_of(f));
}

}  // namespace strata::cli
