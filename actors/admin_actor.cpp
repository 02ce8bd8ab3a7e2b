#include "actors/admin_actor.h"

#include <cstdio>

namespace strata::actors {

AdminActor::AdminActor(asio::io_context& io, CacheActor* cache, BatcherActor* batcher,
                       SparsityProfile initial, bool quiet)
    : Actor(io), cache_(cache), batcher_(batcher), profile_(std::move(initial)), quiet_(quiet) {
  auto s = std::make_shared<EngineStats>();
  s->profile = profile_;
  s->profile_version = profile_.version;
  snap_ = std::move(s);
}

std::shared_ptr<const EngineStats> AdminActor::snapshot() const {
  std::lock_guard<std::mutex> lock(snap_mu_);
  return snap_;
}

asio::awaitable<void> AdminActor::handle(AdminMsg msg) {
  if (auto* m = std::get_if<PublishStatsMsg>(&msg)) {
    auto s = std::make_shared<EngineStats>(*m->stats);
    s->profile = profile_;
    std::lock_guard<std::mutex> lock(snap_mu_);
    snap_ = std::move(s);
  } else if (auto* m = std::get_if<UpdateSparsityMsg>(&msg)) {
    try {
      const auto profile = m->profile;
      const bool shrink = m->shrink_running;
      auto job = [profile, shrink](KvCacheManager& c) { return c.set_profile(profile, shrink); };
      auto ask = cache_->ask(std::move(job));
      const auto version = co_await std::move(ask);
      profile_ = m->profile;
      profile_.version = version;
      {
        std::lock_guard<std::mutex> lock(snap_mu_);
        auto s = std::make_shared<EngineStats>(*snap_);
        s->profile = profile_;
        s->profile_version = version;
        snap_ = std::move(s);
      }
      if (!quiet_) {
        std::fprintf(stderr, "strata: sparsity profile v%llu published (%s, policy %s, C=%d)\n",
                     static_cast<unsigned long long>(version),
                     profile_.enabled ? "enabled" : "disabled", to_string(profile_.policy),
                     profile_.capacity);
      }
      m->done->set_value(version);
    } catch (...) {
      m->done->set_exception(std::current_exception());
    }
  } else if (auto* m = std::get_if<SetLimitsMsg>(&msg)) {
    batcher_->tell(LimitsMsg{m->limits});
  }
}

}  // namespace strata::actors
