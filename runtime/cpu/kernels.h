// fp32 building blocks of the CPU forward pass. Every output element is computed by one
// fixed sequence of operations that depends only on its inputs (never on the batch, the
// row's neighbours or the thread count), so batched, chunked and single-sequence runs give
// bit-identical results.
#pragma once

#include <cstdint>

#include "runtime/cpu/thread_pool.h"

namespace strata::cpu {

// Σ a[i]·b[i] with 8 interleaved fp32 partial sums (two 4-lane vectors, fixed fold order).
float dot(const float* a, const float* b, int n);

// y[t][o] = Σ_k x[t][k] · w[o][k]  (x: [rows][in], w: [out][in] row-major as in HF
// checkpoints, y: [rows][out]). Parallel over output columns.
void matmul(ThreadPool& pool, const float* x, int rows, const float* w, int in, int out, float* y);

// y = x / sqrt(mean(x²) + eps) * weight, one row of `n` (mean of squares in fp64).
void rms_norm(const float* x, const float* weight, int n, double eps, float* y);

// Rotates `heads` vectors of head_dim (HF Llama "rotate_half" pairing: i with i + d/2) at
// `pos`; cos/sin from inv_freq (head_dim/2 values) in fp64, applied in fp32.
void rope(float* v, int heads, int head_dim, const double* inv_freq, std::int64_t pos);

// out[i] = silu(gate[i]) * up[i]
void silu_mul(const float* gate, const float* up, int n, float* out);

}  // namespace strata::cpu
