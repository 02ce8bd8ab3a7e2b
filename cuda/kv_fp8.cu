#include "cuda/cuda_check.h"
#include "cuda/fp8.cuh"
#include "cuda/kv_fp8.h"

namespace strata::cuda {

namespace {

__global__ void rope_kv_fp8_kernel(const RopeKvParams p, std::uint8_t* pool8, const float* scales) {
  const int t = blockIdx.x;
  const int seq = p.seq_of[t];
  if (seq < 0) return;
  const int half = p.head_dim / 2;
  const int row_elems = (p.heads + 2 * p.kv_heads) * p.head_dim;
  bf16* row = p.qkv + static_cast<long long>(t) * row_elems;
  const int pos = p.positions[t];
  // Rotate q and k heads in place: pair (i, i + half) of each head (rope_kv_kernel's arithmetic).
  const int rot_heads = p.heads + p.kv_heads;
  for (int idx = threadIdx.x; idx < rot_heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    bf16* v = row + h * p.head_dim;
    double sn, cs;
    sincos(static_cast<double>(pos) * p.inv_freq[i], &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    const float a = __bfloat162float(v[i]), b = __bfloat162float(v[i + half]);
    v[i] = __float2bfloat16_rn(a * c - b * s);
    v[i + half] = __float2bfloat16_rn(b * c + a * s);
  }
  __syncthreads();
  // K (rotated) and V into the page of this position as e4m3 codes.
  const int kv_slot = (p.slots != nullptr && t < p.num_slot_rows) ? p.slots[t] : pos;
  const int page = p.block_table[static_cast<long long>(seq) * p.table_stride + kv_slot / 16];
  const int slot = kv_slot % 16;
  std::uint8_t* base = pool8 + static_cast<long long>(page) * p.page_elems;
  const long long part = p.page_elems / 2;
  const bf16* k = row + p.heads * p.head_dim;
  const bf16* v = k + p.kv_heads * p.head_dim;
  for (int idx = threadIdx.x; idx < p.kv_heads * p.head_dim; idx += blockDim.x) {
    const int g = idx / p.head_dim, d = idx % p.head_dim;
    const long long off = (static_cast<long long>(g) * 16 + slot) * p.head_dim + d;
    base[off] = fp8::encode(__fdiv_rn(__bfloat162float(k[idx]), scales[g * 2]));
    base[part + off] = fp8::encode(__fdiv_rn(__bfloat162float(v[idx]), scales[g * 2 + 1]));
  }
}

}  // namespace

void launch_rope_kv_write_fp8(const RopeKvParams& p, std::uint8_t* pool8, const float* scales,
                              cudaStream_t s) {
  if (p.num_tokens == 0) return;
  rope_kv_fp8_kernel<<<p.num_tokens, 256, 0, s>>>(p, pool8, scales);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
