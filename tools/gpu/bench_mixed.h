// gpu_bench mixed (issue 19 item 3): a step carrying a prefill chunk beside running decodes
// against the two run apart, through the CUDA backend's real step path (bench_mixed.cpp).
#pragma once

namespace strata::bench {

void bench_mixed();

}  // namespace strata::bench
