// gpu_bench gemm-decode (issue 18 item 3): the Hopper decode GEMM beside cuBLAS and the autotuned
// choice over the Llama-3-8B layer shapes (bench_gemm_decode.cpp).
#pragma once

namespace strata::bench {

void bench_gemm_decode();

}  // namespace strata::bench
