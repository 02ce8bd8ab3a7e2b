#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <numeric>

#include "runtime/error.h"
#include "runtime/sparsity_profile.h"

namespace strata {
namespace {

TEST(SparsityProfile, DefaultLlama3ResolvesToThreeFullLayers) {
  SparsityProfile p;
  p.enabled = true;
  const auto rules = p.resolve(32);
  ASSERT_EQ(rules.size(), 32u);
  for (int l = 0; l < 3; ++l) EXPECT_EQ(rules[l].policy, Policy::kFull);
  for (int l = 3; l < 32; ++l) {
    EXPECT_EQ(rules[l].policy, Policy::kScored);
    EXPECT_EQ(rules[l].capacity, 512);
    EXPECT_EQ(rules[l].ring, 32);
  }
  // DESIGN.md: 3*4500 + 29*512 token-layers of 32*4500.
  long kept = 0;
  for (const auto& r : rules) kept += r.sparse() ? std::min(r.capacity, 4500) : 4500;
  EXPECT_EQ(kept, 28348);
}

// Worked example: C = 512, alpha = 32, sinks = 4, n = 29, beta = 20.
// B = 476, min = floor(476/20) = 23, max = 2*476 - 23 = 929;
// layer j selects 929 - round(j * 906 / 28): j=0 -> 929, j=1 -> 929-32 = 897 (32.36 rounds to
// 32), j=14 -> 929-453 = 476, j=28 -> 23. The mean is B up to rounding: j=7 and j=21 land on
// .5 (226.5, 679.5), both round away from zero, so the total is 29*476 - 1 = 13803.
TEST(SparsityProfile, PyramidWorkedExample) {
  const auto sel = pyramid_selected(512, 32, 4, 29, 20);
  ASSERT_EQ(sel.size(), 29u);
  EXPECT_EQ(sel[0], 929);
  EXPECT_EQ(sel[1], 897);
  EXPECT_EQ(sel[14], 476);
  EXPECT_EQ(sel[28], 23);
  for (std::size_t j = 1; j < sel.size(); ++j) EXPECT_LE(sel[j], sel[j - 1]);
  EXPECT_EQ(std::accumulate(sel.begin(), sel.end(), 0), 476 * 29 - 1);
  SparsityProfile p;
  p.enabled = true;
  p.schedule = Schedule::kPyramid;
  const auto rules = p.resolve(32);
  EXPECT_EQ(rules[3].capacity, 929 + 36);
  EXPECT_EQ(rules[31].capacity, 23 + 36);
}

TEST(SparsityProfile, RejectsWholeProfileNamingTheField) {
  SparsityProfile p;
  p.enabled = true;
  p.schedule = Schedule::kPyramid;
  p.capacity = 40;  // B = 4, min = 0 -> last layer gets sinks + window: invalid
  try {
    p.resolve(32);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "sparsity.schedule");
  }
  p = SparsityProfile{};
  p.enabled = true;
  p.full_layers = 40;
  EXPECT_THROW(p.resolve(32), ConfigError);
  p.full_layers = 3;
  p.schedule = Schedule::kList;
  p.capacity_list = {100, 100};
  EXPECT_THROW(p.resolve(32), ConfigError);
}

TEST(SparsityProfile, JsonRoundTripAndErrors) {
  SparsityProfile base;
  auto p = parse_sparsity_json(boost::json::parse(R"({"capacity": 128, "policy": "window",
      "full_layers": [0, 5], "schedule": [60, 70, 80]})"),
                               base);
  EXPECT_TRUE(p.enabled);
  EXPECT_EQ(p.policy, Policy::kWindow);
  EXPECT_EQ(p.full_layer_list, (std::vector<int>{0, 5}));
  EXPECT_EQ(p.schedule, Schedule::kList);
  const auto back = parse_sparsity_json(to_json(p), base);
  EXPECT_EQ(back.capacity_list, p.capacity_list);
  EXPECT_EQ(back.policy, p.policy);
  try {
    parse_sparsity_json(boost::json::parse(R"({"capacity": "big"})"), base);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "kv_sparsity.capacity");
  }
  EXPECT_THROW(parse_sparsity_json(boost::json::parse(R"({"nope": 1})"), base), ConfigError);
  // Found by the API fuzzer: an integer above INT64_MAX is a ConfigError, not a crash.
  EXPECT_THROW(parse_sparsity_json(boost::json::parse(R"({"capacity": 18446744073709551615})"), base),
               ConfigError);
}

}  // namespace
}  // namespace strata
