// AdminActor: live settings and statistics. It validates and publishes sparsity profiles
// (through the cache actor, so a change lands at a step boundary; each change is versioned
// and logged), forwards scheduler limits to the batcher, and keeps the latest statistics
// snapshot the batcher publishes after every step.
//
// stats() may be called from any thread: snapshots are immutable and swapped whole.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>

#include "actors/actor.h"
#include "actors/batcher_actor.h"
#include "actors/cache_actor.h"

namespace strata::actors {

struct PublishStatsMsg {
  std::shared_ptr<const EngineStats> stats;
};
struct UpdateSparsityMsg {
  SparsityProfile profile;
  bool shrink_running = false;
  std::shared_ptr<std::promise<std::uint64_t>> done;
};
struct SetLimitsMsg {
  SchedulerLimits limits;
};
// The quality guardrail alerted on `version` with quality_monitor.restore_on_alert: when it is
// still the published version, republish the profile of the version before it (as a new
// version) and log it; otherwise log why nothing changed.
struct RestoreProfileMsg {
  std::uint64_t version = 0;
  std::string why;  // the alert, for the log line
  bool shrink_running = false;
};
using AdminMsg = std::variant<PublishStatsMsg, UpdateSparsityMsg, SetLimitsMsg, RestoreProfileMsg>;

class AdminActor final : public Actor<AdminMsg> {
 public:
  AdminActor(asio::io_context& io, CacheActor* cache, BatcherActor* batcher,
             SparsityProfile initial, bool quiet);
  // The latest snapshot (with the current profile), never null.
  std::shared_ptr<const EngineStats> snapshot() const;

 protected:
  asio::awaitable<void> handle(AdminMsg msg) override;
  const char* actor_name() const override { return "admin"; }

 private:
  CacheActor* cache_;
  BatcherActor* batcher_;
  SparsityProfile profile_;                           // strand only
  std::map<std::uint64_t, SparsityProfile> history_;  // every published version (strand only)
  // Publishes through the cache actor (a bad profile throws, nothing changes), returns the
  // version; profile_, history_ and the snapshot follow.
  asio::awaitable<std::uint64_t> publish(SparsityProfile p, bool shrink_running);
  bool quiet_;
  mutable std::mutex snap_mu_;  // guards only the pointer swap
  std::shared_ptr<const EngineStats> snap_;
};

}  // namespace strata::actors
