// Compiles the engine contracts in a CUDA translation unit and provides the first small
// kernel: the device-side twin of LayerSlots::decode_slot, used by decode kernels.
#include "cuda/contracts_check.h"
#include "runtime/kv_layout.h"
#include "runtime/step_plan.h"

namespace strata::cuda {

namespace {
__global__ void decode_slots_kernel(const int* valid, const int* ring_pos, const int* capacity,
                                    const int* ring, int n, int* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const bool full = ring[i] > 0 && valid[i] == capacity[i];
  out[i] = full ? capacity[i] - ring[i] + ring_pos[i] : valid[i];
}
static_assert(KvLayout{8, 128, 2}.page_bytes() == 2 * 8 * kBlockSize * 128 * 2);
}  // namespace

cudaError_t launch_decode_slots(const int* valid, const int* ring_pos, const int* capacity,
                                const int* ring, int n, int* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  decode_slots_kernel<<<(n + 127) / 128, 128, 0, stream>>>(valid, ring_pos, capacity, ring, n, out);
  return cudaGetLastError();
}

}  // namespace strata::cuda
