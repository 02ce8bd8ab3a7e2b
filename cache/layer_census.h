// The per-layer picture of the KV cache the admin console draws (docs/api.md "layers"): per
// model layer, the published profile's rule, pages and bytes held, the distribution of slots
// held over the running sequences, and the census of the kept slots' original token positions
// (SeqResult::kept, recorded with KvCacheManager::record_kept()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata {

// Slots one layer holds per sequence, over the sequences of the cache (prompt slots in temp
// pages included, as SeqUsage::slots_held counts them). Quantiles are values of the sorted
// list at index floor(q * (n - 1)); all zero when n == 0.
struct SlotDistribution {
  int sequences = 0;
  long total = 0;
  double mean = 0.0;
  int min = 0, p25 = 0, p50 = 0, p75 = 0, max = 0;
};

struct LayerUsage {
  LayerRule rule;          // the published profile's rule (sequences may run older ones)
  int pages = 0;           // pages held, temp pages included (= CacheStats::pages_per_layer)
  std::size_t bytes = 0;   // pages * page bytes
  SlotDistribution slots;  // slots held per sequence
  // The last census of each sequence that has one, summed (the backend's local KV heads:
  // slots x heads). kept_sequences == 0: no census yet, or the backend records no positions.
  int kept_sequences = 0;
  KeptPositions kept;
};

// The distribution of `v` (sorted in place).
SlotDistribution slot_distribution(std::vector<int>& v);

}  // namespace strata
