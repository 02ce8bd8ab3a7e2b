#include "api/admin_stats.h"

#include <algorithm>
#include <exception>

#include "runtime/kv_layout.h"

namespace strata::api {

namespace json = boost::json;

namespace {

json::object layer_json(int l, const LayerUsage& u, std::size_t slot_bytes) {
  json::object o;
  o["layer"] = l;
  o["policy"] = to_string(u.rule.policy);
  o["capacity"] = u.rule.capacity;
  o["sinks"] = u.rule.sinks;
  o["window"] = u.rule.window;
  o["pages"] = u.pages;
  o["bytes"] = u.bytes;
  const SlotDistribution& d = u.slots;
  json::object slots;
  slots["sequences"] = d.sequences;
  slots["total"] = d.total;
  slots["mean"] = d.mean;
  slots["min"] = d.min;
  slots["p25"] = d.p25;
  slots["p50"] = d.p50;
  slots["p75"] = d.p75;
  slots["max"] = d.max;
  o["slots"] = std::move(slots);
  o["slot_bytes"] = static_cast<std::size_t>(d.total) * slot_bytes;
  json::object kept;
  kept["sequences"] = u.kept_sequences;
  kept["sinks"] = u.kept.sinks;
  kept["middle"] = u.kept.middle;
  kept["recent"] = u.kept.recent;
  json::array bins;
  for (auto b : u.kept.bins) bins.push_back(b);
  kept["bins"] = std::move(bins);
  o["kept"] = std::move(kept);
  return o;
}

}  // namespace

json::array layers_json(const EngineStats& s, int num_layers) {
  const std::size_t slot_bytes = s.page_bytes / kBlockSize;
  json::array out;
  if (s.layers && !s.layers->empty()) {
    for (std::size_t l = 0; l < s.layers->size(); ++l)
      out.push_back(layer_json(static_cast<int>(l), (*s.layers)[l], slot_bytes));
    return out;
  }
  std::vector<LayerRule> rules;
  try {
    rules = s.profile.resolve(num_layers);
  } catch (const std::exception&) {
    rules.assign(static_cast<std::size_t>(std::max(0, num_layers)), LayerRule{});
  }
  for (std::size_t l = 0; l < rules.size(); ++l) {
    LayerUsage u;
    u.rule = rules[l];
    if (l < s.pages_per_layer.size()) u.pages = s.pages_per_layer[l];
    u.bytes = static_cast<std::size_t>(u.pages) * s.page_bytes;
    out.push_back(layer_json(static_cast<int>(l), u, slot_bytes));
  }
  return out;
}

}  // namespace strata::api
