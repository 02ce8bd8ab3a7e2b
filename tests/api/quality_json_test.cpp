// GET /admin/api/quality's body (api/quality_json.h): per version, per bucket, intervals.
#include "api/quality_json.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

namespace strata::api {
namespace {

namespace json = boost::json;

TEST(QualityJson, OneEntryPerVersionWithBucketsIntervalsAndAlerts) {
  EngineStats s;
  EXPECT_FALSE(quality_json(s).at("enabled").as_bool());
  EXPECT_TRUE(quality_json(s).at("versions").as_array().empty());

  s.profile_version = 2;
  s.replays.sampled = 3;
  s.replays.finished = 3;
  auto q = std::make_shared<QualityReport>();
  q->sample_rate = 0.01;
  q->alert_below = 0.9;
  q->alert_min_samples = 2;
  ReplayRecord rec;
  rec.profile_version = 1;
  rec.prompt.assign(100, 1);
  ReplayScore full;
  full.positions = 20, full.agree = 20;
  add_replay(*q, rec, full);
  rec.profile_version = 2;
  ReplayScore half;
  half.positions = 20, half.agree = 10, half.delta_sum = -4.0, half.delta_sq = 2.0;
  add_replay(*q, rec, half);
  rec.prompt.assign(2000, 1);
  add_replay(*q, rec, half);
  q->alerts.push_back({2, 0.5, 0.72, 2, true});
  s.quality = q;

  const json::object o = quality_json(s);
  EXPECT_TRUE(o.at("enabled").as_bool());
  EXPECT_DOUBLE_EQ(o.at("sample_rate").as_double(), 0.01);
  EXPECT_EQ(o.at("replays").at("finished").as_uint64(), 3u);
  const auto& vs = o.at("versions").as_array();
  ASSERT_EQ(vs.size(), 2u);
  const auto& v1 = vs[0].as_object();
  EXPECT_EQ(v1.at("profile_version").as_uint64(), 1u);
  EXPECT_FALSE(v1.at("published").as_bool());
  EXPECT_FALSE(v1.at("alert").as_bool());
  EXPECT_DOUBLE_EQ(v1.at("argmax_agreement").as_double(), 1.0);
  const auto& v2 = vs[1].as_object();
  EXPECT_TRUE(v2.at("published").as_bool());
  EXPECT_TRUE(v2.at("alert").as_bool());
  EXPECT_EQ(v2.at("samples").as_uint64(), 2u);
  EXPECT_EQ(v2.at("positions").as_uint64(), 40u);
  EXPECT_DOUBLE_EQ(v2.at("argmax_agreement").as_double(), 0.5);
  EXPECT_DOUBLE_EQ(v2.at("delta_loglik").as_double(), -0.2);
  const auto& ci = v2.at("argmax_agreement_interval").as_array();
  ASSERT_EQ(ci.size(), 2u);
  EXPECT_LT(ci[0].as_double(), 0.5);
  EXPECT_GT(ci[1].as_double(), 0.5);
  const auto& buckets = v2.at("buckets").as_array();
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].at("prompt_len").as_string(), "0-255");
  EXPECT_EQ(buckets[1].at("prompt_len").as_string(), "1024-4095");
  const auto& alerts = o.at("alerts").as_array();
  ASSERT_EQ(alerts.size(), 1u);
  EXPECT_EQ(alerts[0].at("profile_version").as_uint64(), 2u);
  EXPECT_TRUE(alerts[0].at("restore_requested").as_bool());
}

}  // namespace
}  // namespace strata::api
