// Internal: the prefill attention kernels behind launch_prefill_attention (attention.h).
// Plain C++ header.
#pragma once

#include <string>

#include "cuda/attention.h"

namespace strata::cuda {

// WMMA kernel, S/P/O round-tripping through shared memory (attention_prefill.cu).
void launch_prefill_attention_wmma(const PrefillAttentionParams& p, cudaStream_t s);
// FlashAttention-2 style kernel, fragments in registers (attention_prefill_fa2.cu); blocks
// of two query heads when pair_heads and the GQA group size is even, else one.
void launch_prefill_attention_fa2(const PrefillAttentionParams& p, cudaStream_t s, bool pair_heads);
// Hopper kernel (attention_prefill_hopper.cu, sm_90a): launches and returns true, or returns
// false with the reason in `why` (shape or device it does not take) and launches nothing.
// variant: 1 (kHopper, the validated schedule), 5 (kHopperV5: pipelined consumers, ping-pong,
// split K / V ring), 6 (kHopperV6: v5 persistent, one block per SM).
bool launch_prefill_attention_hopper(const PrefillAttentionParams& p, cudaStream_t s,
                                     std::string* why, int variant);

}  // namespace strata::cuda
