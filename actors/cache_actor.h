// CacheActor: the KV cache manager (cache/kv_cache_manager.h) behind its own strand. The
// manager is not thread-safe; every use is a job posted onto this strand, so page tables,
// admission, sparsity actions and live profile changes are serialized — and a profile
// change lands between two scheduling calls, i.e. at a step boundary.
//
// ask() is the mailbox: the job runs on the strand and the caller's coroutine resumes on its
// own executor with the result (or the job's exception).
#pragma once

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <future>
#include <memory>
#include <type_traits>
#include <utility>

#include "actors/actor.h"
#include "cache/kv_cache_manager.h"

namespace strata::actors {

class CacheActor {
 public:
  CacheActor(asio::io_context& io, std::unique_ptr<KvCacheManager> manager)
      : strand_(asio::make_strand(io)), manager_(std::move(manager)) {}

  // From a coroutine of another actor.
  template <class F>
  auto ask(F fn) -> asio::awaitable<std::invoke_result_t<F&, KvCacheManager&>> {
    using R = std::invoke_result_t<F&, KvCacheManager&>;
    co_return co_await asio::co_spawn(
        strand_,
        [this, fn = std::move(fn)]() mutable -> asio::awaitable<R> { co_return fn(*manager_); },
        asio::use_awaitable);
  }
  // From a thread outside the io_context (blocks until the job ran).
  template <class F>
  auto ask_blocking(F fn) -> std::invoke_result_t<F&, KvCacheManager&> {
    using R = std::invoke_result_t<F&, KvCacheManager&>;
    auto fut = asio::co_spawn(
        strand_,
        [this, fn = std::move(fn)]() mutable -> asio::awaitable<R> { co_return fn(*manager_); },
        asio::use_future);
    return fut.get();
  }

 private:
  Strand strand_;
  std::unique_ptr<KvCacheManager> manager_;
};

}  // namespace strata::actors
