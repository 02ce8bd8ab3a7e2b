// Device twin of LayerSlots::decode_slot (runtime/step_plan.h) for a batch of layers.
#pragma once

#include <cuda_runtime.h>

namespace strata::cuda {

// out[i] = slot the next decode token of entry i is written to. All pointers device, [n].
cudaError_t launch_decode_slots(const int* valid, const int* ring_pos, const int* capacity,
                                const int* ring, int n, int* out, cudaStream_t stream);

}  // namespace strata::cuda
