#include "runtime/fp8.h"

#include <cmath>
#include <limits>

namespace strata {

namespace {
// Round-to-nearest-even of v ≥ 0 to an integer; v < 2^23 so floor and v − floor are exact.
std::uint32_t rne(float v) {
  const float f = std::floor(v);
  const float r = v - f;
  auto q = static_cast<std::uint32_t>(f);
  if (r > 0.5f || (r == 0.5f && (q & 1u))) ++q;
  return q;
}
}  // namespace

std::uint8_t float_to_e4m3(float x) {
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | kE4m3Nan;
  const float a = std::fabs(x);
  if (a >= kE4m3Max) return sign | 0x7E;  // saturate (infinity included)
  int e2 = 0;
  std::frexp(a, &e2);  // a = m·2^e2, m in [0.5, 1): the binade is 2^(e2−1)
  const int e = e2 - 1;
  // Step of the grid at a: 2^−9 below the smallest normal 2^−6, else 2^(e−3). Codes count
  // grid steps continuously: code = a / step for subnormals, (e + 7)·8 + (a / step − 8)
  // for normals, so a mantissa rounding up to 16 carries into the next exponent by itself.
  std::uint32_t code = 0;
  if (a == 0.0f || e < -6) {
    code = rne(std::ldexp(a, 9));  // 0..8 (8 is 2^−6, the smallest normal)
  } else {
    code = static_cast<std::uint32_t>(e + 7) * 8u + rne(std::ldexp(a, 3 - e)) - 8u;
  }
  if (code > 0x7E) code = 0x7E;  // 448 < a < 464 rounds to 448 anyway; this never triggers
  return static_cast<std::uint8_t>(sign | code);
}

float e4m3_to_float(std::uint8_t code) {
  const bool neg = (code & 0x80) != 0;
  const int exp = (code >> 3) & 0xF, man = code & 0x7;
  float v = 0.0f;
  if (exp == 0xF && man == 0x7)
    v = std::numeric_limits<float>::quiet_NaN();
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(man), -9);
  else
    v = std::ldexp(static_cast<float>(8 + man), exp - 10);
  return neg ? -v : v;
}

}  // namespace strata
