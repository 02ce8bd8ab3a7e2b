// QualityMonitor: the guardrail's scorer (docs/actors.md "Quality guardrail"). The batcher
// sends it the full-cache logits of each replay chunk; it scores them against the sparse
// run's record (actors/quality.h) on its own strand, so the batcher never spends the
// O(rows x vocab) work, aggregates finished replays per profile version and prompt bucket,
// and raises an alert (once per version) when a version's agreement falls below
// quality_monitor.alert_below.
//
// snapshot() may be called from any thread: reports are immutable and swapped whole.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <variant>

#include "actors/actor.h"
#include "actors/quality.h"
#include "runtime/config.h"

namespace strata::actors {

struct ReplayRowsMsg {
  std::uint64_t replay_id = 0;
  std::shared_ptr<const ReplayRecord> rec;
  int first_pos = 0;          // position of logits row 0
  std::vector<float> logits;  // [rows][vocab], full cache
  bool last = false;          // the replay's last chunk: it ends here, scored whole or not
};
// The replay ended before all its positions were scored (shutdown, error): forget it.
struct ReplayAbandonedMsg {
  std::uint64_t replay_id = 0;
};
using QualityMsg = std::variant<ReplayRowsMsg, ReplayAbandonedMsg>;

struct QualitySettings {
  QualityMonitorSection config;
  int vocab = 0;
  // On the monitor's strand, once per version that alerts (after it is in the snapshot).
  std::function<void(const QualityAlert&)> on_alert;
  std::function<void(const std::string&)> log;  // operator log lines (null: quiet)
};

class QualityMonitor final : public Actor<QualityMsg> {
 public:
  QualityMonitor(asio::io_context& io, QualitySettings settings);
  std::shared_ptr<const QualityReport> snapshot() const;  // never null

 protected:
  asio::awaitable<void> handle(QualityMsg msg) override;
  const char* actor_name() const override { return "quality monitor"; }

 private:
  void finish(std::uint64_t id, const ReplayRecord& rec, const ReplayScore& score);

  QualitySettings settings_;
  QualityReport report_;  // strand only
  std::unordered_map<std::uint64_t, ReplayScore> partial_;
  mutable std::mutex snap_mu_;  // guards only the pointer swap
  std::shared_ptr<const QualityReport> snap_;
};

}  // namespace strata::actors
