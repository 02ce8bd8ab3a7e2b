// Counting a census of kept positions (SeqResult::kept, runtime/step_plan.h): the classes and
// bins of the token positions one layer of one sequence holds after a step. One rule for every
// backend: the CPU backend counts the positions its pool records, the CUDA backend those its
// position pool records (cuda/backend/census.cpp). Plain header (std only).
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/sparsity_profile.h"
#include "runtime/step_plan.h"

namespace strata {

class KeptCounter {
 public:
  // rule: the layer's rule after the step; tokens: the sequence's positions after the step.
  KeptCounter(const LayerRule& rule, std::int32_t tokens)
      : sparse_(rule.sparse()),
        sinks_(rule.sinks),
        recent_from_(tokens - (rule.sparse() ? rule.window : 0)),
        tokens_(tokens) {}

  // n slots (slots x heads) holding `position`.
  void add(std::int32_t position, std::int64_t n = 1) {
    if (tokens_ <= 0) return;
    if (sparse_ && position < sinks_) {
      c_.sinks += n;
    } else if (sparse_ && position >= recent_from_) {
      c_.recent += n;
    } else {
      c_.middle += n;
    }
    const auto b = static_cast<std::int64_t>(position) * kPositionBins / tokens_;
    c_.bins[static_cast<std::size_t>(std::clamp<std::int64_t>(b, 0, kPositionBins - 1))] += n;
  }
  // A full layer: slot p holds position p in every head, nothing to read.
  void add_full(std::int32_t valid, int heads) {
    for (std::int32_t p = 0; p < valid; ++p) add(p, heads);
  }
  const KeptPositions& result() const { return c_; }

 private:
  bool sparse_;
  std::int32_t sinks_, recent_from_, tokens_;
  KeptPositions c_;
};

}  // namespace strata
