// An on/off switch read from the environment, for the CUDA backend's developer switches
// (STRATA_SPARSE_SIDE, STRATA_SCORE_IN_ATTN, STRATA_RESOLVE_IN_ROPE, STRATA_GEMM_TUNE_EVICT):
// unset or empty gives `dflt`, 1 on, 0 off, anything else a ConfigError that says what each
// value does. Plain C++ header.
#pragma once

#include <cstdlib>
#include <string>

#include "runtime/error.h"

namespace strata::cuda {

inline bool env_switch(const char* name, bool dflt, const std::string& on, const std::string& off) {
  const char* v = std::getenv(name);
  const std::string s = v ? v : "";
  if (s.empty()) return dflt;
  if (s == "0") return false;
  if (s == "1") return true;
  throw ConfigError(name, "'" + s + "' is not one of: 1 (" + on + (dflt ? ", the default" : "") +
                              "), 0 (" + off + (dflt ? "" : ", the default") + ")");
}

}  // namespace strata::cuda
