#include "actors/admin_actor.h"

#include <cstdio>

namespace strata::actors {

AdminActor::AdminActor(asio::io_context& io, CacheActor* cache, BatcherActor* batcher,
                       SparsityProfile initial, bool quiet)
    : Actor(io), cache_(cache), batcher_(batcher), profile_(std::move(initial)), quiet_(quiet) {
  history_[profile_.version] = profile_;
  auto s = std::make_shared<EngineStats>();
  s->profile = profile_;
  s->profile_version = profile_.version;
  snap_ = std::move(s);
}

std::shared_ptr<const EngineStats> AdminActor::snapshot() const {
  std::lock_guard<std::mutex> lock(snap_mu_);
  return snap_;
}

asio::awaitable<std::uint64_t> AdminActor::publish(SparsityProfile p, bool shrink) {
  auto job = [p, shrink](KvCacheManager& c) { return c.set_profile(p, shrink); };
  auto ask = cache_->ask(std::move(job));
  const auto version = co_await std::move(ask);
  profile_ = std::move(p);
  profile_.version = version;
  history_[version] = profile_;
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
  co_return version;
}

asio::awaitable<void> AdminActor::handle(AdminMsg msg) {
  if (auto* m = std::get_if<PublishStatsMsg>(&msg)) {
    auto s = std::make_shared<EngineStats>(*m->stats);
    s->profile = profile_;
    std::lock_guard<std::mutex> lock(snap_mu_);
    snap_ = std::move(s);
  } else if (auto* m = std::get_if<UpdateSparsityMsg>(&msg)) {
    try {
      const auto version = co_await publish(m->profile, m->shrink_running);
      m->done->set_value(version);
    } catch (...) {
      m->done->set_exception(std::current_exception());
    }
  } else if (auto* m = std::get_if<SetLimitsMsg>(&msg)) {
    batcher_->tell(LimitsMsg{m->limits});
  } else if (auto* m = std::get_if<RestoreProfileMsg>(&msg)) {
    const std::string head = "strata: quality guardrail: " + m->why + ": ";
    auto prev = history_.lower_bound(m->version);
    if (profile_.version != m->version) {
      std::fprintf(stderr, "%snot restored: v%llu is no longer the published version (v%llu)\n",
                   head.c_str(), static_cast<unsigned long long>(m->version),
                   static_cast<unsigned long long>(profile_.version));
    } else if (prev == history_.begin()) {
      std::fprintf(stderr, "%snot restored: v%llu has no previous version\n", head.c_str(),
                   static_cast<unsigned long long>(m->version));
    } else {
      --prev;
      const auto from = prev->first;
      const auto v = co_await publish(prev->second, m->shrink_running);
      std::fprintf(stderr, "%srestored v%llu's profile as v%llu (replacing v%llu)\n", head.c_str(),
                   static_cast<unsigned long long>(from), static_cast<unsigned long long>(v),
                   static_cast<unsigned long long>(m->version));
    }
  }
}

}  // namespace strata::actors
