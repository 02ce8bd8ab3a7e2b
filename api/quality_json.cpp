#include "api/quality_json.h"

#include <algorithm>
#include <boost/json.hpp>

namespace strata::api {

namespace json = boost::json;

namespace {

json::object cell_json(const QualityCell& c) {
  json::object o;
  o["samples"] = c.samples;
  o["positions"] = c.positions;
  o["argmax_agreement"] = c.agreement();
  const Interval a = c.agreement_interval();
  o["argmax_agreement_interval"] = json::array{a.lo, a.hi};
  o["delta_loglik"] = c.delta_mean();
  const Interval d = c.delta_interval();
  o["delta_loglik_interval"] = json::array{d.lo, d.hi};
  return o;
}

}  // namespace

json::object quality_json(const EngineStats& s) {
  json::object o;
  o["enabled"] = s.quality != nullptr;
  json::object r;
  r["sampled"] = s.replays.sampled;
  r["finished"] = s.replays.finished;
  r["dropped"] = s.replays.dropped;
  r["preempted"] = s.replays.preempted;
  r["steps"] = s.replays.steps;
  r["tokens"] = s.replays.tokens;
  o["replays"] = std::move(r);
  o["interval"] =
      "95 %: agreement, the union of the Wilson interval over positions and the normal "
      "interval over requests; delta_loglik, the normal interval over requests";
  json::array versions, alerts;
  if (s.quality) {
    const QualityReport& q = *s.quality;
    o["sample_rate"] = q.sample_rate;
    o["alert_below"] = q.alert_below;
    o["alert_min_samples"] = q.alert_min_samples;
    for (const auto v : q.versions()) {
      json::object e = cell_json(q.version_total(v));
      e["profile_version"] = v;
      e["published"] = v == s.profile_version;
      e["alert"] = std::any_of(q.alerts.begin(), q.alerts.end(),
                               [&](const QualityAlert& a) { return a.version == v; });
      json::array buckets;
      for (const auto& c : q.cells) {
        if (c.version != v) continue;
        json::object b = cell_json(c);
        b["prompt_len"] = c.bucket;
        buckets.push_back(std::move(b));
      }
      e["buckets"] = std::move(buckets);
      versions.push_back(std::move(e));
    }
    for (const auto& a : q.alerts) {
      json::object x;
      x["profile_version"] = a.version;
      x["argmax_agreement"] = a.agreement;
      x["interval_upper"] = a.upper;
      x["samples"] = a.samples;
      x["restore_requested"] = a.restore_requested;
      alerts.push_back(std::move(x));
    }
  }
  o["versions"] = std::move(versions);
  o["alerts"] = std::move(alerts);
  return o;
}

}  // namespace strata::api
