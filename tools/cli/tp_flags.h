// The tensor-parallel flags of `strata serve` and `strata generate`
// (docs/tensor-parallel.md):
//   --tp-size N          ranks; one process runs all N (CPU: in-process ranks; CUDA: one GPU
//                        per rank) = backend.tp_size
//   --tp-rank R          this process's rank when the ranks are separate processes/hosts
//   --tp-master H:P      rank 0's rendezvous address (rank 0 listens, the others connect)
//   --tp-timeout S       timeout in seconds of the rendezvous, the rank links and every
//                        collective between the processes (default 120)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "actors/backend_factory.h"
#include "runtime/config.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/tp/tp_rendezvous.h"
#include "tools/cli/command.h"

namespace strata::cli {

inline const std::vector<std::string> kTpFlagNames = {"tp-size", "tp-rank", "tp-master",
                                                      "tp-timeout"};
inline constexpr const char* kTpFlagsHelp =
    "  [--tp-size N] [--tp-rank R --tp-master HOST:PORT [--tp-timeout S]]\n";

struct TpFlags {
  int size = 1;
  std::optional<int> rank;           // set: multi-process mode
  std::optional<TpEndpoint> master;  // set with rank
  double timeout_s = 120;
};

// Reads the flags; --tp-size sets config.backend.tp_size. ConfigError on inconsistent flags
// (--tp-rank without --tp-master, rank outside [0, size), ...).
TpFlags read_tp_flags(const Args& a, Config& config);

// Multi-process mode: runs the rendezvous of the NCCL unique id (rank 0 listens on --tp-master
// and hands the id to ranks 1..N-1; a rank that does not show up within --tp-timeout stops
// the start-up with a ConfigError naming it). Returns the id: with `cuda`, rank 0 makes it with
// ncclGetUniqueId (cuda::tp::make_unique_id); on the CPU it is random bytes (unused).
TpUniqueId tp_rendezvous_from_flags(const TpFlags& f, bool cuda);

// Separate processes (docs/tensor-parallel.md "Separate processes"), on the CPU backend or,
// with `cuda`, on one GPU per process joined by NCCL (cuda/tp/tp_process.h).
// Rank 0: a BackendFactory that runs the rendezvous, accepts the other ranks' links on the
// --tp-master port + 1 and builds rank 0's rank backend plus one proxy per remote rank (for
// Engine::create, or make_tp_group when teacher forcing).
BackendFactory tp_rank0_factory(const TpFlags& f, bool cuda);
// Rank r > 0: the rendezvous, the links, the rank's shard, then the follower loop until rank
// 0 stops. Returns the process exit code.
int tp_follower_main(const TpFlags& f, const Config& config, bool cuda);
// Whether this process runs the CUDA backend: backend.kind "cuda", or "auto" with a visible
// GPU when `auto_gpu` (serve; generate runs CUDA only when asked). ConfigError when CUDA is
// asked for but the binary has none or no device is visible.
bool tp_use_cuda(const Config& config, bool auto_gpu);
// (The CPU backend options of a config: cpu_backend_options, runtime/cpu/cpu_backend.h.)

}  // namespace strata::cli
