// How the Engine gets its backends (Engine::create): a factory tools/ and the tests pass in.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/backend.h"
#include "runtime/config.h"

namespace strata {

// Makes the backends, one per tensor-parallel rank (rank 0 first). tools/ passes the CUDA
// factory when built with CUDA; an empty factory means the CPU reference backend.
using BackendFactory = std::function<std::vector<std::unique_ptr<Backend>>(const Config&)>;

}  // namespace strata
