// The quality guardrail's report as JSON (GET /admin/api/quality, docs/api.md): per profile
// version (a profile change gets its own entry) and per prompt-length bucket, the sample and
// position counts, argmax agreement and Δ log-likelihood with their 95 % intervals, alerts,
// and the replays' accounting. Pure.
#pragma once

#include <boost/json/object.hpp>

#include "actors/engine_stats.h"

namespace strata::api {

boost::json::object quality_json(const EngineStats& s);

}  // namespace strata::api
