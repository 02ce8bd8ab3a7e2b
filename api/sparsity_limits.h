// The operator's bounds on per-request `kv_sparsity` (sparsity.request_override, docs/api.md):
// under within-limits a request may only lower capacity and window below the serving
// profile, layer by layer; it may not turn sparsity off, make a sparse layer full or raise
// any layer's KV use. Pure; throws ApiError 400 naming kv_sparsity.<field>.
#pragma once

#include "runtime/sparsity_profile.h"

namespace strata::api {

// `num_layers` > 0: compares the resolved per-layer rules (and validates the request's
// profile for this depth); 0 (depth unknown): compares the profile fields.
void check_within_limits(const SparsityProfile& requested, const SparsityProfile& base,
                         int num_layers);

}  // namespace strata::api
