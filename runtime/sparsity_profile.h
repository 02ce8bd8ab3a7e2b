// The sparsity profile: which layers keep their full KV cache and how the others are
// budgeted (DESIGN.md section 3, docs/sparsity.md). Plain data plus validation and the
// per-layer schedule; the cache manager (cache/) and the backends consume `LayerRule`s.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <boost/json/fwd.hpp>

namespace YAML {
class Node;
}

namespace strata {

enum class Policy : std::uint8_t { kFull = 0, kWindow = 1, kSnapKv = 2, kScored = 3 };
enum class PoolKind : std::uint8_t { kMax = 0, kAvg = 1 };
enum class Schedule : std::uint8_t { kUniform = 0, kPyramid = 1, kList = 2 };

const char* to_string(Policy p);
const char* to_string(PoolKind p);
const char* to_string(Schedule s);

// What one layer keeps, resolved from a profile for a given model depth.
struct LayerRule {
  Policy policy = Policy::kFull;
  int capacity = 0;  // C_l slots incl. sinks and window; 0 for full layers (unbounded)
  int ring = 0;      // decode ring length: window α for `scored`, C_l - sinks for `window`, else 0
  int sinks = 0;     // protected leading slots (sparse layers only)
  int window = 0;    // observation window α (sparse layers only)
  PoolKind pool = PoolKind::kMax;  // score pooling at selection (sparse layers only)
  int pool_kernel = 7;             // odd pooling kernel (sparse layers only)
  bool sparse() const { return policy != Policy::kFull; }
};

struct SparsityProfile {
  bool enabled = false;             // false: every layer is `full`
  int full_layers = 3;              // leading full layers (ignored when full_layer_list is set)
  std::vector<int> full_layer_list; // explicit full layers, any order
  Policy policy = Policy::kScored;  // policy of every non-full layer
  int capacity = 512;               // C: slots per sparse layer (sinks + window included)
  Schedule schedule = Schedule::kUniform;
  std::vector<int> capacity_list;   // Schedule::kList: one C_l per sparse layer, in layer order
  int pyramid_beta = 20;            // Schedule::kPyramid: min selected = floor(B / beta)
  int window = 32;                  // α: observation window and recent ring
  int sinks = 4;
  PoolKind pool = PoolKind::kMax;
  int pool_kernel = 7;              // odd, >= 1
  std::uint64_t version = 0;        // assigned by whoever publishes it (the engine)

  // Per-layer rules for a model of `num_layers` layers. Throws ConfigError naming the field
  // ("sparsity.capacity", ...) when the profile is invalid for this depth: every sparse
  // layer needs C_l >= sinks + window + 1.
  std::vector<LayerRule> resolve(int num_layers) const;
  // Validation without a model (field ranges only); resolve() validates everything.
  void validate_fields() const;

  bool operator==(const SparsityProfile&) const = default;
};

// Pyramid arithmetic (PyramidKV) over n sparse layers for the selected part
// B = C - window - sinks: returns the selected count per sparse layer (mean B).
std::vector<int> pyramid_selected(int capacity, int window, int sinks, int n_sparse, int beta);

// Parsing. Unknown keys and bad values throw ConfigError naming `prefix.key` and the
// allowed values. Fields absent from the node keep the values of `base`.
SparsityProfile parse_sparsity_yaml(const YAML::Node& node, const SparsityProfile& base,
                                    const std::string& prefix = "sparsity");
SparsityProfile parse_sparsity_json(const boost::json::value& v, const SparsityProfile& base,
                                    const std::string& prefix = "kv_sparsity");
boost::json::value to_json(const SparsityProfile& p);

}  // namespace strata
