// The per-layer part of the admin stats JSON (GET /admin/api/stats, the SSE stream; docs/api.md
// "Per-layer statistics"): pure, from the engine's stats snapshot.
#pragma once

#include <boost/json.hpp>

#include "actors/engine_stats.h"

namespace strata::api {

// One object per model layer: rule (policy, capacity, sinks, window), pages and bytes held,
// slots held over the running sequences (count, mean, min, quartiles, max) and the bytes those
// slots hold, and the census of kept-slot positions (sinks / middle / recent, deciles of the
// position in the sequence). From s.layers when a census exists; before the first one, the
// rules of s.profile for `num_layers` and s.pages_per_layer, with empty distributions.
boost::json::array layers_json(const EngineStats& s, int num_layers);

}  // namespace strata::api
