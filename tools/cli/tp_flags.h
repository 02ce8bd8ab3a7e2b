// The tensor-parallel flags of `strata serve` and `strata generate`
// (docs/tensor-parallel.md):
//   --tp-size N          ranks; one process runs all N (CPU: in-process ranks; CUDA: one GPU
//                        per rank) = backend.tp_size
//   --tp-rank R          this process's rank when the ranks are separate processes/hosts
//   --tp-master H:P      rank 0's rendezvous address (rank 0 listens, the others connect)
//   --tp-timeout S       rendezvous timeout in seconds (default 120)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/config.h"
#include "runtime/tp_rendezvous.h"
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
// the start-up with a ConfigError naming it). Returns the id.
TpUniqueId tp_rendezvous_from_flags(const TpFlags& f);

}  // namespace strata::cli
