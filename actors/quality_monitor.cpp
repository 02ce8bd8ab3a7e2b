#include "actors/quality_monitor.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

namespace strata::actors {

namespace {
std::string fixed(double v, int digits = 4) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}
}  // namespace

QualityMonitor::QualityMonitor(asio::io_context& io, QualitySettings settings)
    : Actor(io), settings_(std::move(settings)) {
  report_.sample_rate = settings_.config.sample_rate;
  report_.alert_below = settings_.config.alert_below;
  report_.alert_min_samples = settings_.config.alert_min_samples;
  snap_ = std::make_shared<const QualityReport>(report_);
}

std::shared_ptr<const QualityReport> QualityMonitor::snapshot() const {
  std::lock_guard<std::mutex> lock(snap_mu_);
  return snap_;
}

asio::awaitable<void> QualityMonitor::handle(QualityMsg msg) {
  if (auto* m = std::get_if<ReplayAbandonedMsg>(&msg)) {
    partial_.erase(m->replay_id);
    co_return;
  }
  auto& m = std::get<ReplayRowsMsg>(msg);
  ReplayScore& score = partial_[m.replay_id];
  score_replay_rows(*m.rec, m.first_pos, m.logits, settings_.vocab, score);
  if (!score.done(*m.rec)) {
    if (m.last) {  // (positions the batcher never asked for: counted, not published)
      partial_.erase(m.replay_id);
      ++report_.replays_incomplete;
    }
    co_return;
  }
  const ReplayScore done = std::move(score);
  partial_.erase(m.replay_id);
  finish(m.replay_id, *m.rec, done);
}

void QualityMonitor::finish(std::uint64_t, const ReplayRecord& rec, const ReplayScore& score) {
  add_replay(report_, rec, score);
  const std::uint64_t v = rec.profile_version;
  std::optional<QualityAlert> fresh;
  const bool known = std::any_of(report_.alerts.begin(), report_.alerts.end(),
                                 [&](const QualityAlert& a) { return a.version == v; });
  if (!known && alert_tripped(report_, v)) {
    const QualityCell t = report_.version_total(v);
    QualityAlert a;
    a.version = v;
    a.agreement = t.agreement();
    a.upper = t.agreement_interval().hi;
    a.samples = t.samples;
    a.restore_requested = settings_.config.restore_on_alert;
    report_.alerts.push_back(a);
    fresh = a;
  }
  {
    auto s = std::make_shared<const QualityReport>(report_);
    std::lock_guard<std::mutex> lock(snap_mu_);
    snap_ = std::move(s);
  }
  if (!fresh) return;
  if (settings_.log) {
    const Interval ci = report_.version_total(v).agreement_interval();
    settings_.log("strata: quality guardrail alert: profile v" + std::to_string(v) +
                  " argmax agreement " + fixed(fresh->agreement) + " (95% [" + fixed(ci.lo) + ", " +
                  fixed(ci.hi) + "], " + std::to_string(fresh->samples) +
                  " samples) is below quality_monitor.alert_below " +
                  fixed(settings_.config.alert_below) +
                  (fresh->restore_requested ? "; restoring the previous profile" : ""));
  }
  if (settings_.on_alert) settings_.on_alert(*fresh);
}

}  // namespace strata::actors
