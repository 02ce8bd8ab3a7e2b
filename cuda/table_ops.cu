// The resident page tables' delta kernel (cuda/table_ops.h).
#include "cuda/table_ops.h"

namespace strata::cuda {
namespace {

constexpr int kWarps = 8;  // ops per block

__global__ void __launch_bounds__(kWarps * 32) table_ops_kernel(const TableOpsParams p) {
  const int lane = threadIdx.x % 32;
  for (int o = blockIdx.x * kWarps + threadIdx.x / 32; o < p.num_ops; o += gridDim.x * kWarps) {
    const TableOp op = p.ops[o];
    std::int32_t* dst = p.store + op.dst;
    if (op.kind == kTableWrite) {
      const std::int32_t* src = p.data + (op.arg - p.data_base);
      for (int e = lane; e < op.count; e += 32) dst[e] = src[e];
    } else if (op.kind == kTableCopy) {
      const std::int32_t* src = p.store + op.arg;  // (an entry no op of the step writes)
      for (int e = lane; e < op.count; e += 32) dst[e] = src[e];
    } else {
      for (int e = lane; e < op.count; e += 32) dst[e] = op.arg;
    }
  }
}

}  // namespace

cudaError_t launch_table_ops(const TableOpsParams& p, cudaStream_t stream) {
  if (p.num_ops <= 0) return cudaSuccess;
  if (!p.store || !p.ops) return cudaErrorInvalidValue;
  const int blocks = std::min((p.num_ops + kWarps - 1) / kWarps, 1024);
  table_ops_kernel<<<blocks, kWarps * 32, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace strata::cuda
