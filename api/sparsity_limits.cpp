#include "api/sparsity_limits.h"

#include <string>

#include "api/api_error.h"

namespace strata::api {

namespace {

[[noreturn]] void over(const std::string& field, const std::string& what) {
  throw bad_request("kv_sparsity." + field,
                    "kv_sparsity." + field + ": " + what +
                        " (sparsity.request_override: within-limits lets a request only lower "
                        "capacity and window below the server's profile)");
}

}  // namespace

void check_within_limits(const SparsityProfile& req, const SparsityProfile& base, int num_layers) {
  if (!base.enabled) return;  // a full cache: any sparse profile keeps less
  if (!req.enabled) over("enabled", "a request cannot turn sparsity off");
  if (num_layers <= 0) {
    if (req.capacity > base.capacity)
      over("capacity", std::to_string(req.capacity) + " is above the server's " +
                           std::to_string(base.capacity));
    if (req.window > base.window)
      over("window",
           std::to_string(req.window) + " is above the server's " + std::to_string(base.window));
    if (req.schedule != base.schedule || req.full_layers != base.full_layers ||
        req.full_layer_list != base.full_layer_list)
      over("full_layers", "the full layers and the schedule are the server's to choose");
    return;
  }
  const auto mine = req.resolve(num_layers);
  const auto theirs = base.resolve(num_layers);
  for (std::size_t l = 0; l < theirs.size(); ++l) {
    if (!theirs[l].sparse()) continue;
    const std::string at = " on layer " + std::to_string(l);
    if (!mine[l].sparse()) over("full_layers", "layer " + std::to_string(l) + " is sparse here");
    if (mine[l].capacity > theirs[l].capacity)
      over("capacity", std::to_string(mine[l].capacity) + " slots" + at +
                           " is above the server's " + std::to_string(theirs[l].capacity));
    if (mine[l].window > theirs[l].window)
      over("window", std::to_string(mine[l].window) + at + " is above the server's " +
                         std::to_string(theirs[l].window));
  }
}

}  // namespace strata::api
