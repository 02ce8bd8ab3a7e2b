// Sparsity profiles for tests (cache, runtime, actors, gpu): one place for the set-up every
// test repeated field by field.
#pragma once

#include "runtime/sparsity_profile.h"

namespace strata::test {

// An enabled profile with the fields tests vary; the others (schedule, pool, ...) keep their
// defaults.
inline SparsityProfile sparse_profile(Policy policy, int full_layers, int capacity, int window,
                                      int sinks) {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = full_layers;
  p.policy = policy;
  p.capacity = capacity;
  p.window = window;
  p.sinks = sinks;
  return p;
}

}  // namespace strata::test
