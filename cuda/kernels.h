// Element-wise and small kernels of the Llama forward pass: one params struct per kernel,
// launchers that throw InternalError on a launch error (kernels themselves in kernels.cu).
// bf16 storage, fp32 arithmetic. Plain C++ header (host compilers include it).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/fp8.h"
#include "cuda/sparse/sparse_meta.h"

namespace strata::cuda {

using bf16 = __nv_bfloat16;

// resid[t] = embed[tokens[t]] (fp32 residual stream).
struct EmbeddingParams {
  const int* tokens;  // [T], 0 <= id < vocab (checked on the host)
  const bf16* embed;  // [vocab, hidden]
  float* resid;       // [T, hidden]
  int num_tokens;
  int hidden;
};
void launch_embedding(const EmbeddingParams& p, cudaStream_t s);

// If delta: resid += delta. Then out = bf16(resid * rsqrt(mean(resid^2) + eps) * weight).
// Rows listed in `rows` (or all rows 0..num_rows-1 when rows == nullptr) go to out row i.
// With out8.codes (FP8 layers, cuda/fp8.h) the fp32 normalized row is quantized per row into
// out8 instead (the input of an FP8 GEMM; `out` is then unused).
struct RmsNormParams {
  float* resid;        // [T, hidden]
  const bf16* delta;   // [T, hidden] or nullptr
  const bf16* weight;  // [hidden]
  bf16* out;           // [num_rows, hidden]
  const int* rows;     // [num_rows] source rows, or nullptr (identity)
  int num_rows;
  int hidden;
  float eps;
  Fp8Rows out8 = {};         // [num_rows, hidden] codes and [num_rows] scales, or none
  float out8_static = 0.0f;  // > 0: the static per-tensor scale (cuda/fp8.cuh quantize_row)
  // The 16-byte vectorized kernel (issue 19 item 2): the row read once into registers, 16-byte
  // loads and stores. Used for the bf16 output when hidden % 8 == 0, hidden <= 32768 and every
  // pointer is 16-byte aligned (else the scalar kernel). Same function; the sum of squares is
  // added in another order (fp32 rounding only).
  bool vec = false;
};
void launch_rmsnorm(const RmsNormParams& p, cudaStream_t s);

// RoPE (HF rotate_half convention, inv_freq already llama3/linear-scaled, angles in fp64)
// on q and k of the fused qkv rows, in place, then K and V of every token written into its
// page: slot = positions[t] of a full layer, page = block_table[seq_of[t]][slot / 16].
// A token with seq_of[t] < 0 (graph padding) is skipped entirely.
struct RopeKvParams {
  bf16* qkv;               // [T, (heads + 2 * kv_heads) * head_dim]
  const int* positions;    // [T]
  const int* seq_of;       // [T] batch index of the token's sequence, -1 = padding
  const int* block_table;  // [num_seqs, table_stride] page ids of this layer
  int table_stride;
  const double* inv_freq;  // [head_dim / 2]
  bf16* kv_pool;           // page p at kv_pool + p * page_elems (KvLayout)
  long long page_elems;
  int num_tokens;
  int heads;
  int kv_heads;
  int head_dim;
  // Optional per-row KV slot (sparse layers decode into a ring/append slot, not the
  // position): rows t < num_slot_rows write slot slots[t]; other rows (and nullptr) write
  // slot = position.
  const int* slots = nullptr;
  int num_slot_rows = 0;
  // The 16-byte vectorized kernel (issue 19 item 2): cos/sin computed once per token and pair
  // index (fp64 sincos rounded to fp32, as the scalar kernel, not once per head), 8 pairs per
  // thread with 16-byte loads and stores, rotated K written to the page from registers. Used
  // when head_dim % 16 == 0, head_dim <= 512 and qkv, kv_pool are 16-byte aligned (else the
  // scalar kernel). Same values as the scalar kernel.
  bool vec = false;
  // Optional (sparse decode steps, issue 18 item 1): the `scored` layers' ring resolve
  // (sparse::launch_scored_resolve's rule and result) of the decode rows t < num_slot_rows, run
  // by the row's own block before it writes the row's K/V, instead of its own launch. seqs[t]
  // is row t's DecodeSeq (policy 0 or a ring not full: nothing), whose `table` indexes `pages`;
  // scores and positions (or null) are the layer's pools; K/V is this launch's pool (bf16, or the
  // e4m3 codes of launch_rope_kv_write_fp8). head_dim % 16 == 0.
  struct Resolve {
    const sparse::DecodeSeq* seqs = nullptr;  // null: no resolve
    float* scores = nullptr;
    std::int32_t* positions = nullptr;
    const std::int32_t* pages = nullptr;
  } resolve;
  // [table_positions][head_dim / 2] (cos, sin) of each position's angles: the kernels' own fp64
  // sincos rounded to fp32, computed once (launch_rope_table), so a lookup gives the bits the
  // per-use sincos gives. Positions at or past table_positions (and a null table) use sincos.
  const float2* cos_sin = nullptr;
  int table_positions = 0;
};
void launch_rope_kv_write(const RopeKvParams& p, cudaStream_t s);
// RopeKvParams::cos_sin for positions [0, positions): table[pos * half + i] = (cos, sin) of
// pos * inv_freq[i], the same fp64 sincos as the kernels, rounded to fp32.
void launch_rope_table(float2* table, const double* inv_freq, int half, int positions,
                       cudaStream_t s);

// out = silu(gate) * up with gu = [gate | up] per row. With out8.codes the fp32 products are
// quantized per row into out8 instead (the down GEMM's FP8 input; `out` is then unused).
struct SwigluParams {
  const bf16* gu;  // [T, 2 * inter]
  bf16* out;       // [T, inter]
  int num_tokens;
  int inter;
  Fp8Rows out8 = {};         // [T, inter] codes and [T] scales, or none
  float out8_static = 0.0f;  // > 0: the static per-tensor scale
  // The 16-byte vectorized kernel for the bf16 output (issue 19 item 2): one 8-column chunk per
  // thread, a 2-D grid (no per-element 64-bit index division). Used when inter % 8 == 0 and
  // gu, out are 16-byte aligned (else the scalar kernel). Bit-identical to the scalar kernel.
  bool vec = false;
};
void launch_swiglu(const SwigluParams& p, cudaStream_t s);

// Whether a launch runs the 16-byte kernel (`vec` set and its preconditions met; else the scalar
// one). A function of the row shape and the base pointers only, never of the row count or the
// row list, so a row's result never depends on which other rows share the launch (a guard:
// tests/cuda/kernels_choice_test.cpp). Host functions.
bool rmsnorm_vec_applies(const RmsNormParams& p);
bool rope_kv_vec_applies(const RopeKvParams& p);
bool swiglu_vec_applies(const SwigluParams& p);

// STRATA_PREFILL_FUSION: 1 or unset (the default since the H200 run of 2026-12-02): the backend
// sets `vec` on the RMSNorm, RoPE + K/V and SwiGLU launches above (prefill and decode, eager and
// graphs); 2: that and the residual add in the O and down GEMMs' epilogue of prefill steps
// (backend_impl.h resid_epilogue: measured no faster end to end yet); 0: the scalar kernels.
// Read once; another value throws ConfigError.
int prefill_fusion_from_env();

// Device twin of strata::random_weight (runtime/model/make_model.h): element i of a tensor whose
// FNV-1a name hash is `name_hash` = offset + random_weight(seed, name, i, scale), bf16 (RNE),
// so `random:<preset>` on the GPU equals `strata make-model` with the same seed.
struct RandomFillParams {
  bf16* out;
  long long n;
  unsigned long long seed;
  unsigned long long name_hash;
  float scale;
  float offset;
};
void launch_random_fill(const RandomFillParams& p, cudaStream_t s);

// Greedy: out[r] = argmax of row r (lowest id on ties). One block per row. With log_z, also
// log_z[r] = log sum_i exp(row[i] - max) (the argmax token's logprob is -log_z[r]: the quality
// guardrail records every sampled token's logprob, runtime/sampler.cpp's definition).
struct ArgmaxParams {
  const float* logits;  // [rows, vocab]
  int* out;             // [rows]
  int rows;
  int vocab;
  float* log_z = nullptr;  // [rows] or nullptr
};
void launch_argmax(const ArgmaxParams& p, cudaStream_t s);

// dst[i] = src[rows[i]] for bf16 rows of `width` elements.
void launch_gather_rows(const bf16* src, const int* rows, int num_rows, int width, bf16* dst,
                        cudaStream_t s);

// Fills a bf16 buffer with a constant bit pattern (poisoning in tests, padding).
void launch_fill_bf16(bf16* out, long long n, float value, cudaStream_t s);

}  // namespace strata::cuda
