// The per-layer part of the admin stats JSON (api/admin_stats.h, docs/api.md "Per-layer
// statistics").
#include "api/admin_stats.h"

#include <gtest/gtest.h>

namespace strata::api {
namespace {

namespace json = boost::json;

SparsityProfile profile() {
  SparsityProfile p;
  p.enabled = true;
  p.full_layers = 1;
  p.policy = Policy::kScored;
  p.capacity = 64;
  p.window = 8;
  p.sinks = 4;
  return p;
}

TEST(AdminStats, LayersFromTheCensus) {
  EngineStats s;
  s.profile = profile();
  s.page_bytes = 4096;  // 256 bytes per slot
  const auto rules = s.profile.resolve(2);
  std::vector<LayerUsage> layers(2);
  for (int l = 0; l < 2; ++l) layers[l].rule = rules[l];
  layers[0].pages = 7;
  layers[0].bytes = 7 * 4096;
  layers[0].slots = {3, 85, 85.0 / 3, 10, 10, 25, 25, 50};
  layers[1].pages = 5;
  layers[1].bytes = 5 * 4096;
  layers[1].slots = {3, 67, 67.0 / 3, 10, 10, 25, 25, 32};
  layers[1].kept_sequences = 2;
  layers[1].kept.sinks = 16;
  layers[1].kept.middle = 70;
  layers[1].kept.recent = 42;
  layers[1].kept.bins[9] = 42;
  s.layers = std::make_shared<const std::vector<LayerUsage>>(layers);
  const json::array a = layers_json(s, 2);
  ASSERT_EQ(a.size(), 2u);
  const auto& l0 = a[0].as_object();
  EXPECT_EQ(l0.at("layer").as_int64(), 0);
  EXPECT_EQ(l0.at("policy").as_string(), "full");
  EXPECT_EQ(l0.at("capacity").as_int64(), 0);
  EXPECT_EQ(l0.at("pages").as_int64(), 7);
  EXPECT_EQ(l0.at("bytes").to_number<std::int64_t>(), 7 * 4096);
  EXPECT_EQ(l0.at("slot_bytes").to_number<std::int64_t>(), 85 * 256);
  const auto& sl = l0.at("slots").as_object();
  EXPECT_EQ(sl.at("sequences").as_int64(), 3);
  EXPECT_EQ(sl.at("min").as_int64(), 10);
  EXPECT_EQ(sl.at("p50").as_int64(), 25);
  EXPECT_EQ(sl.at("max").as_int64(), 50);
  EXPECT_NEAR(sl.at("mean").as_double(), 85.0 / 3, 1e-12);
  const auto& l1 = a[1].as_object();
  EXPECT_EQ(l1.at("policy").as_string(), "scored");
  EXPECT_EQ(l1.at("capacity").as_int64(), 64);
  EXPECT_EQ(l1.at("sinks").as_int64(), 4);
  EXPECT_EQ(l1.at("window").as_int64(), 8);
  const auto& k = l1.at("kept").as_object();
  EXPECT_EQ(k.at("sequences").as_int64(), 2);
  EXPECT_EQ(k.at("sinks").as_int64(), 16);
  EXPECT_EQ(k.at("middle").as_int64(), 70);
  EXPECT_EQ(k.at("recent").as_int64(), 42);
  ASSERT_EQ(k.at("bins").as_array().size(), static_cast<std::size_t>(kPositionBins));
  EXPECT_EQ(k.at("bins").as_array()[9].as_int64(), 42);
}

TEST(AdminStats, BeforeTheFirstCensusTheProfileAndPages) {
  EngineStats s;
  s.profile = profile();
  s.page_bytes = 1024;
  s.pages_per_layer = {3, 1, 2};
  const json::array a = layers_json(s, 3);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].at("policy").as_string(), "full");
  EXPECT_EQ(a[2].at("policy").as_string(), "scored");
  EXPECT_EQ(a[2].at("pages").as_int64(), 2);
  EXPECT_EQ(a[2].at("bytes").to_number<std::int64_t>(), 2048);
  EXPECT_EQ(a[2].at("slots").at("sequences").as_int64(), 0);
  EXPECT_EQ(a[2].at("kept").at("sequences").as_int64(), 0);
  // A profile that does not resolve for this depth still gives one entry per layer.
  s.profile.full_layers = 10;
  s.profile.full_layer_list = {7};
  EXPECT_EQ(layers_json(s, 3).size(), 3u);
}

}  // namespace
}  // namespace strata::api
