// The `scored` layer rule the CUDA host tests plan with (capacity C, 4 sinks, window and ring 32).
#pragma once

#include "runtime/sparsity_profile.h"

namespace strata::cuda::testutil {

inline LayerRule scored(int capacity) {
  LayerRule r;
  r.policy = Policy::kScored;
  r.capacity = capacity;
  r.sinks = 4;
  r.window = 32;
  r.ring = 32;
  return r;
}

}  // namespace strata::cuda::testutil
