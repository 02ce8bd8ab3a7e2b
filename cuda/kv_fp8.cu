#include <cub/block/block_reduce.cuh>

#include "cuda/cuda_check.h"
#include "cuda/fp8.cuh"
#include "cuda/kv_fp8.h"
#include "cuda/rope_kv.cuh"
#include "runtime/error.h"
#include "runtime/kv_layout.h"

namespace strata::cuda {

namespace {

__global__ void rope_kv_fp8_kernel(const RopeKvParams p, std::uint8_t* pool8, const float* scales) {
  // rope_kv_kernel's rotation and slot (cuda/rope_kv.cuh); K and V stored as e4m3 codes.
  rope_kv_row(
      p, blockIdx.x,
      [=](long long page, long long off, long long part, int g, bf16 k, bf16 v) {
        pool8[page + off] = fp8::encode(__fdiv_rn(__bfloat162float(k), scales[g * 2]));
        pool8[page + part + off] = fp8::encode(__fdiv_rn(__bfloat162float(v), scales[g * 2 + 1]));
      },
      pool8);
}

constexpr int kDequantThreads = 256;

// One block per (output page j, sequence s): grid (max_pages, num_seqs).
__global__ void __launch_bounds__(kDequantThreads)
    kv_dequant_pages_kernel(const KvDequantParams p) {
  using BlockReduce = cub::BlockReduce<long long, kDequantThreads>;
  __shared__ typename BlockReduce::TempStorage reduce;
  __shared__ long long base_s;
  const int s = blockIdx.y, j = blockIdx.x;
  auto pages_of = [&](int i) -> long long {
    const int n = p.nq[i];
    return n > 0 ? (static_cast<long long>(p.q_pos0[i]) + n + kBlockSize - 1) / kBlockSize : 0;
  };
  const long long n_s = pages_of(s);
  if (j >= n_s) return;  // the whole block: n_s is the same for every thread
  long long before = 0;  // pages of the sequences before s, in row order
  for (int i = threadIdx.x; i < s; i += kDequantThreads) before += pages_of(i);
  before = BlockReduce(reduce).Sum(before);
  if (threadIdx.x == 0) base_s = before;
  __syncthreads();
  const long long out_page = base_s + j;
  if (threadIdx.x == 0)
    p.out_table[static_cast<long long>(s) * p.out_stride + j] = static_cast<int>(out_page);
  const int len = p.q_pos0[s] + p.nq[s];
  const int src_page = p.block_table[static_cast<long long>(s) * p.table_stride + j];
  const std::uint8_t* src = p.pool8 + static_cast<long long>(src_page) * p.page_elems;
  bf16* dst = p.out_pool + out_page * p.page_elems;
  // Layout (kv_layout.h): K part then V part, each [kv_heads][16 slots][head_dim]; 16 codes per
  // step never cross a slot (head_dim % 16 == 0, dispatch.h).
  const long long half = p.page_elems / 2;
  const int per_head = kBlockSize * p.head_dim;
  for (long long e = static_cast<long long>(threadIdx.x) * 16; e < p.page_elems;
       e += kDequantThreads * 16) {
    const bool is_v = e >= half;
    const long long ep = is_v ? e - half : e;
    const int g = static_cast<int>(ep / per_head);
    const int slot = static_cast<int>((ep % per_head) / p.head_dim);
    uint4 out[2];
    if (j * kBlockSize + slot >= len) {
      out[0] = out[1] = make_uint4(0, 0, 0, 0);
    } else {
      const float sc = p.scales[g * 2 + (is_v ? 1 : 0)];
      const uint4 in = *reinterpret_cast<const uint4*>(src + e);
      const std::uint32_t w[4] = {in.x, in.y, in.z, in.w};
      __nv_bfloat162* o2 = reinterpret_cast<__nv_bfloat162*>(out);
      for (int q = 0; q < 4; ++q) {
        const float2 lo = fp8::decode2(static_cast<std::uint16_t>(w[q] & 0xffffu));
        const float2 hi = fp8::decode2(static_cast<std::uint16_t>(w[q] >> 16));
        o2[q * 2] = __floats2bfloat162_rn(lo.x * sc, lo.y * sc);
        o2[q * 2 + 1] = __floats2bfloat162_rn(hi.x * sc, hi.y * sc);
      }
    }
    uint4* d = reinterpret_cast<uint4*>(dst + e);
    d[0] = out[0];
    d[1] = out[1];
  }
}

}  // namespace

void launch_kv_dequant_pages(const KvDequantParams& p, cudaStream_t s) {
  if (p.num_seqs <= 0 || p.max_pages <= 0) return;
  if (p.head_dim % 16 != 0 || p.page_elems % 16 != 0)
    throw InternalError("launch_kv_dequant_pages: head_dim and page_elems must be multiples of 16");
  if (p.num_seqs > 65535) throw InternalError("launch_kv_dequant_pages: more than 65535 sequences");
  kv_dequant_pages_kernel<<<dim3(static_cast<unsigned>(p.max_pages),
                                 static_cast<unsigned>(p.num_seqs)),
                            kDequantThreads, 0, s>>>(p);
  CUDA_CHECK_LAUNCH();
}

void launch_rope_kv_write_fp8(const RopeKvParams& p, std::uint8_t* pool8, const float* scales,
                              cudaStream_t s) {
  if (p.num_tokens == 0) return;
  check_rope_resolve(p, "launch_rope_kv_write_fp8");
  rope_kv_fp8_kernel<<<p.num_tokens, 256, 0, s>>>(p, pool8, scales);
  CUDA_CHECK_LAUNCH();
}

}  // namespace strata::cuda
