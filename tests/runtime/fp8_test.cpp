#include "runtime/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace strata {
namespace {

TEST(Fp8E4m3, KnownCodes) {
  EXPECT_EQ(e4m3_to_float(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x39), 1.125f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0xFE), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)));
}

TEST(Fp8E4m3, All256CodesRoundTripAndPositiveCodesIncrease) {
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const float v = e4m3_to_float(code);
    if ((c & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v));
      EXPECT_EQ(float_to_e4m3(v), code) << c;  // NaN keeps its sign
      continue;
    }
    EXPECT_EQ(float_to_e4m3(v), code) << c;
    if ((c & 0x7F) > 0) {
      EXPECT_GT(std::fabs(v), std::fabs(e4m3_to_float(static_cast<std::uint8_t>(c - 1)))) << c;
    }
  }
}

// Every midpoint between neighbouring finite values goes to the even code; a hair either
// side goes to the nearer one. Covers subnormals (0 | 2^-9 | ... | 2^-6) and the top binade.
TEST(Fp8E4m3, RoundsToNearestEvenAtEveryTie) {
  for (int c = 0; c < 0x7E; ++c) {
    for (const float sign : {1.0f, -1.0f}) {
      const auto lo = static_cast<std::uint8_t>(c), hi = static_cast<std::uint8_t>(c + 1);
      const std::uint8_t s = sign < 0 ? 0x80 : 0x00;
      const float a = e4m3_to_float(lo), b = e4m3_to_float(hi);
      const float mid = (a + b) / 2;  // exact: both have ≤ 4 significant bits
      ASSERT_EQ(mid - a, b - mid);
      const std::uint8_t even = (c % 2 == 0) ? lo : hi;
      EXPECT_EQ(float_to_e4m3(sign * mid), s | even) << c;
      EXPECT_EQ(float_to_e4m3(sign * std::nextafter(mid, 0.0f)), s | lo) << c;
      EXPECT_EQ(float_to_e4m3(sign * std::nextafter(mid, 1e9f)), s | hi) << c;
    }
  }
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // tie between 0 and 2^-9: to 0
  EXPECT_EQ(float_to_e4m3(std::ldexp(3.0f, -10)), 0x02);  // tie between 2^-9 and 2^-8: to 2
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -30)), 0x00);
  EXPECT_EQ(float_to_e4m3(-std::ldexp(1.0f, -30)), 0x80);  // -0
}

TEST(Fp8E4m3, SaturatesToMaxFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const float v : {448.0f, 449.0f, 463.9f, 464.0f, 480.0f, 512.0f, 1e6f, 3e38f, inf}) {
    EXPECT_EQ(float_to_e4m3(v), 0x7E) << v;
    EXPECT_EQ(float_to_e4m3(-v), 0xFE) << v;
  }
  // The top binade steps by 32: 416 is 0x7D, 432 the tie between 416 and 448 (to even: 448).
  EXPECT_EQ(float_to_e4m3(416.0f), 0x7D);
  EXPECT_EQ(float_to_e4m3(431.0f), 0x7D);
  EXPECT_EQ(float_to_e4m3(432.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), kE4m3Nan);
}

}  // namespace
}  // namespace strata
