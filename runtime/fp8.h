// OCP FP8 E4M3FN ("e4m3"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities,
// S.1111.111 is NaN, so the largest finite value is ±448 (S.1111.110). Normals are
// (1 + m/8)·2^(e−7) for e in 1..15, subnormals m/8·2^−6 = m·2^−9 (smallest 2^−9).
// The CPU FP8 oracle (docs/cpu-backend.md "FP8") and the CUDA kernels follow these rules.
#pragma once

#include <cstdint>

namespace strata {

inline constexpr float kE4m3Max = 448.0f;
inline constexpr std::uint8_t kE4m3Nan = 0x7F;  // S.1111.111 (the sign bit is kept)

// Round to nearest, ties to even, saturating: finite |x| beyond 448 (including values that
// would round up past it) and ±infinity give ±448; NaN gives NaN with x's sign bit; ±0
// keeps its sign. Independent of the floating-point environment's rounding mode.
std::uint8_t float_to_e4m3(float x);

// Exact (every e4m3 value is an fp32 value); the two NaN codes give a quiet NaN.
float e4m3_to_float(std::uint8_t code);

}  // namespace strata
