// AdminActor: live settings and statistics. It validates and publishes sparsity profiles
// (through the cache actor, so a change lands at a step boundary; each change is versioned
// and logged), forwards scheduler limits to the batcher, and keeps the latest statistics
// snapshot the batcher publishes after every step.
//
// stats() may be called from any thread: snapshots are immutable and swapped whole.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
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
using AdminMsg = std::variant<PublishStatsMsg, UpdateSparsityMsg, SetLimitsMsg>;

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
  SparsityProfile profile_;  // strand only
  bool quiet_;
  mutable std::mutex snap_mu_;  // guards only the pointer swap
  std::shared_ptr<const EngineStats> snap_;
};

}  // namespace strata::actors
