#include "runtime/sparsity_profile.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdint>
#include <set>

#include "runtime/error.h"
#include "runtime/yaml_util.h"

namespace strata {
namespace json = boost::json;

const char* to_string(Policy p) {
  switch (p) {
    case Policy::kFull: return "full";
    case Policy::kWindow: return "window";
    case Policy::kSnapKv: return "snapkv";
    case Policy::kScored: return "scored";
  }
  return "?";
}
const char* to_string(PoolKind p) { return p == PoolKind::kMax ? "max" : "avg"; }
const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kUniform: return "uniform";
    case Schedule::kPyramid: return "pyramid";
    case Schedule::kList: return "list";
  }
  return "?";
}

namespace {
constexpr int kMaxCapacity = 1 << 22;

Policy policy_from(const std::string& s) {
  if (s == "full") return Policy::kFull;
  if (s == "window") return Policy::kWindow;
  if (s == "snapkv") return Policy::kSnapKv;
  return Policy::kScored;
}
}  // namespace

std::vector<int> pyramid_selected(int capacity, int window, int sinks, int n, int beta) {
  const int b = capacity - window - sinks;
  std::vector<int> sel(static_cast<std::size_t>(std::max(n, 0)));
  if (n <= 0) return sel;
  if (n == 1) {
    sel[0] = b;
    return sel;
  }
  const int mn = b / beta;  // floor for b >= 0
  const int mx = 2 * b - mn;
  for (int j = 0; j < n; ++j)
    sel[j] = mx - static_cast<int>(std::lround(static_cast<double>(j) * (mx - mn) / (n - 1)));
  return sel;
}

void SparsityProfile::validate_fields() const {
  const std::string p = "sparsity.";
  if (full_layers < 0) throw ConfigError(p + "full_layers", "must be >= 0");
  if (window < 1) throw ConfigError(p + "window", "must be >= 1, got " + std::to_string(window));
  if (sinks < 0) throw ConfigError(p + "sinks", "must be >= 0, got " + std::to_string(sinks));
  if (capacity < sinks + window + 1 || capacity > kMaxCapacity)
    throw ConfigError(p + "capacity", "must be in [sinks + window + 1 = " +
                                          std::to_string(sinks + window + 1) + ", " +
                                          std::to_string(kMaxCapacity) + "], got " +
                                          std::to_string(capacity));
  if (pool_kernel < 1 || pool_kernel % 2 == 0 || pool_kernel > 255)
    throw ConfigError(p + "pool_kernel", "must be odd and in [1, 255], got " + std::to_string(pool_kernel));
  if (pyramid_beta < 1) throw ConfigError(p + "pyramid_beta", "must be >= 1");
  if (policy == Policy::kFull && enabled)
    throw ConfigError(p + "policy", "'full' is not a sparse policy (allowed: window, snapkv, scored; "
                                    "use enabled: false for a full cache)");
  for (int l : full_layer_list)
    if (l < 0) throw ConfigError(p + "full_layers", "layer indices must be >= 0");
}

std::vector<LayerRule> SparsityProfile::resolve(int num_layers) const {
  std::vector<LayerRule> rules(static_cast<std::size_t>(num_layers));
  if (!enabled) return rules;
  validate_fields();
  std::vector<bool> is_full(static_cast<std::size_t>(num_layers), false);
  if (!full_layer_list.empty()) {
    for (int l : full_layer_list) {
      if (l >= num_layers)
        throw ConfigError("sparsity.full_layers", "layer " + std::to_string(l) +
                                                      " does not exist (model has " +
                                                      std::to_string(num_layers) + " layers)");
      is_full[static_cast<std::size_t>(l)] = true;
    }
  } else {
    if (full_layers > num_layers)
      throw ConfigError("sparsity.full_layers", "must be <= " + std::to_string(num_layers) +
                                                    " (the model's layers), got " +
                                                    std::to_string(full_layers));
    for (int l = 0; l < full_layers; ++l) is_full[static_cast<std::size_t>(l)] = true;
  }
  const int n_sparse = static_cast<int>(std::count(is_full.begin(), is_full.end(), false));
  std::vector<int> caps(static_cast<std::size_t>(n_sparse), capacity);
  if (schedule == Schedule::kPyramid) {
    auto sel = pyramid_selected(capacity, window, sinks, n_sparse, pyramid_beta);
    for (int j = 0; j < n_sparse; ++j) caps[j] = sel[j] + window + sinks;
  } else if (schedule == Schedule::kList) {
    if (static_cast<int>(capacity_list.size()) != n_sparse)
      throw ConfigError("sparsity.schedule", "list has " + std::to_string(capacity_list.size()) +
                                                 " capacities, the model has " +
                                                 std::to_string(n_sparse) + " sparse layers");
    caps = capacity_list;
  }
  int j = 0;
  for (int l = 0; l < num_layers; ++l) {
    auto& r = rules[static_cast<std::size_t>(l)];
    if (is_full[static_cast<std::size_t>(l)]) continue;
    const int c = caps[static_cast<std::size_t>(j)];
    if (c < sinks + window + 1 || c > kMaxCapacity)
      throw ConfigError(schedule == Schedule::kUniform ? "sparsity.capacity" : "sparsity.schedule",
                        "layer " + std::to_string(l) + " gets capacity " + std::to_string(c) +
                            ", below sinks + window + 1 = " + std::to_string(sinks + window + 1));
    r.policy = policy;
    r.capacity = c;
    r.sinks = sinks;
    r.window = window;
    r.pool = pool;
    r.pool_kernel = pool_kernel;
    r.ring = policy == Policy::kScored ? window : policy == Policy::kWindow ? c - sinks : 0;
    ++j;
  }
  return rules;
}

SparsityProfile parse_sparsity_yaml(const YAML::Node& node, const SparsityProfile& base,
                                    const std::string& prefix) {
  using namespace yaml;
  SparsityProfile p = base;
  if (!node || node.IsNull()) return p;
  check_keys(node, prefix,
             {"enabled", "full_layers", "policy", "capacity", "schedule", "pyramid_beta", "window",
              "sinks", "pool", "pool_kernel"});
  bool saw_enabled = false;
  for (const auto& kv : node) {
    const auto k = kv.first.as<std::string>();
    const auto key = key_path(prefix, k);
    const YAML::Node& v = kv.second;
    if (k == "enabled") {
      p.enabled = read_bool(v, key);
      saw_enabled = true;
    } else if (k == "full_layers") {
      if (v.IsSequence()) {
        p.full_layer_list.clear();
        for (auto x : read_int_list(v, key, 0, 4096)) p.full_layer_list.push_back(static_cast<int>(x));
      } else {
        p.full_layers = static_cast<int>(read_int(v, key, 0, 4096));
        p.full_layer_list.clear();
      }
    } else if (k == "policy") {
      p.policy = policy_from(read_enum(v, key, {"window", "snapkv", "scored"}));
    } else if (k == "capacity") {
      p.capacity = static_cast<int>(read_int(v, key, 1, kMaxCapacity));
    } else if (k == "schedule") {
      if (v.IsSequence()) {
        p.schedule = Schedule::kList;
        p.capacity_list.clear();
        for (auto x : read_int_list(v, key, 1, kMaxCapacity)) p.capacity_list.push_back(static_cast<int>(x));
      } else {
        const auto s = read_enum(v, key, {"uniform", "pyramid"});
        p.schedule = s == "uniform" ? Schedule::kUniform : Schedule::kPyramid;
      }
    } else if (k == "pyramid_beta") {
      p.pyramid_beta = static_cast<int>(read_int(v, key, 1, 1 << 20));
    } else if (k == "window") {
      p.window = static_cast<int>(read_int(v, key, 1, 1 << 16));
    } else if (k == "sinks") {
      p.sinks = static_cast<int>(read_int(v, key, 0, 1 << 16));
    } else if (k == "pool") {
      p.pool = read_enum(v, key, {"max", "avg"}) == "max" ? PoolKind::kMax : PoolKind::kAvg;
    } else if (k == "pool_kernel") {
      p.pool_kernel = static_cast<int>(read_int(v, key, 1, 255));
    }
  }
  if (!saw_enabled) p.enabled = true;  // a profile section given means sparsity on
  if (p.enabled) p.validate_fields();
  return p;
}

namespace {
int json_int(const json::value& v, const std::string& key, int lo, int hi) {
  if (!v.is_int64() && !v.is_uint64()) throw ConfigError(key, "must be an integer");
  // A uint64 above INT64_MAX does not fit to_number<int64_t>() (which throws): clamp it.
  const std::int64_t x = v.is_uint64() && v.as_uint64() > static_cast<std::uint64_t>(INT64_MAX)
                             ? INT64_MAX
                             : v.to_number<std::int64_t>();
  if (x < lo || x > hi)
    throw ConfigError(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "], got " + std::to_string(x));
  return static_cast<int>(x);
}
std::string json_enum(const json::value& v, const std::string& key,
                      std::initializer_list<const char*> allowed) {
  std::string s = v.is_string() ? std::string(v.as_string()) : std::string("<not a string>");
  std::string all;
  for (auto* a : allowed) {
    if (s == a) return s;
    all += (all.empty() ? "" : ", ") + std::string(a);
  }
  throw ConfigError(key, "got '" + s + "' (allowed: " + all + ")");
}
}  // namespace

SparsityProfile parse_sparsity_json(const json::value& v, const SparsityProfile& base,
                                    const std::string& prefix) {
  if (!v.is_object()) throw ConfigError(prefix, "must be an object");
  SparsityProfile p = base;
  bool saw_enabled = false;
  for (const auto& [kk, val] : v.as_object()) {
    const std::string k(kk);
    const std::string key = prefix + "." + k;
    if (k == "enabled") {
      if (!val.is_bool()) throw ConfigError(key, "must be true or false");
      p.enabled = val.as_bool();
      saw_enabled = true;
    } else if (k == "full_layers") {
      if (val.is_array()) {
        p.full_layer_list.clear();
        for (const auto& e : val.as_array()) p.full_layer_list.push_back(json_int(e, key, 0, 4096));
      } else {
        p.full_layers = json_int(val, key, 0, 4096);
        p.full_layer_list.clear();
      }
    } else if (k == "policy") {
      p.policy = policy_from(json_enum(val, key, {"window", "snapkv", "scored"}));
    } else if (k == "capacity") {
      p.capacity = json_int(val, key, 1, kMaxCapacity);
    } else if (k == "schedule") {
      if (val.is_array()) {
        p.schedule = Schedule::kList;
        p.capacity_list.clear();
        for (const auto& e : val.as_array()) p.capacity_list.push_back(json_int(e, key, 1, kMaxCapacity));
      } else {
        p.schedule = json_enum(val, key, {"uniform", "pyramid"}) == "uniform" ? Schedule::kUniform
                                                                              : Schedule::kPyramid;
      }
    } else if (k == "pyramid_beta") {
      p.pyramid_beta = json_int(val, key, 1, 1 << 20);
    } else if (k == "window") {
      p.window = json_int(val, key, 1, 1 << 16);
    } else if (k == "sinks") {
      p.sinks = json_int(val, key, 0, 1 << 16);
    } else if (k == "pool") {
      p.pool = json_enum(val, key, {"max", "avg"}) == "max" ? PoolKind::kMax : PoolKind::kAvg;
    } else if (k == "pool_kernel") {
      p.pool_kernel = json_int(val, key, 1, 255);
    } else if (k == "version") {
      // read-only (assigned when a profile is published); accepted so GET output can be re-sent
    } else {
      throw ConfigError(key, "unknown key (allowed: enabled, full_layers, policy, capacity, "
                             "schedule, pyramid_beta, window, sinks, pool, pool_kernel)");
    }
  }
  if (!saw_enabled) p.enabled = true;
  if (p.enabled) p.validate_fields();
  return p;
}

json::value to_json(const SparsityProfile& p) {
  json::object o;
  o["enabled"] = p.enabled;
  if (p.full_layer_list.empty()) {
    o["full_layers"] = p.full_layers;
  } else {
    json::array a;
    for (int l : p.full_layer_list) a.push_back(l);
    o["full_layers"] = a;
  }
  o["policy"] = to_string(p.policy);
  o["capacity"] = p.capacity;
  if (p.schedule == Schedule::kList) {
    json::array a;
    for (int c : p.capacity_list) a.push_back(c);
    o["schedule"] = a;
  } else {
    o["schedule"] = to_string(p.schedule);
  }
  o["pyramid_beta"] = p.pyramid_beta;
  o["window"] = p.window;
  o["sinks"] = p.sinks;
  o["pool"] = to_string(p.pool);
  o["pool_kernel"] = p.pool_kernel;
  o["version"] = p.version;
  return o;
}

}  // namespace strata
