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

  // From a coroutine of another actor. (Named temporaries: GCC 12 mis-destroys lambda
  // temporaries that live inside a co_await expression.)
  template <class F>
  auto ask(F fn) -> asio::awaitable<std::invoke_result_t<F&, KvCacheManager&>> {
    using R = std::invoke_result_t<F&, KvCacheManager&>;
    auto job =
        asio::co_spawn(strand_, run_job<R>(manager_.get(), std::move(fn)), asio::use_awaitable);
    co_return co_await std::move(job);
  }
  // From a thread outside the io_context (blocks until the job ran).
  template <class F>
  auto ask_blocking(F fn) -> std::invoke_result_t<F&, KvCacheManager&> {
    using R = std::invoke_result_t<F&, KvCacheManager&>;
    auto fut = asio::co_spawn(strand_, run_job<R>(manager_.get(), std::move(fn)), asio::use_future);
    return fut.get();
  }

 private:
  template <class R, class F>
  static asio::awaitable<R> run_job(KvCacheManager* m, F fn) {
    co_return fn(*m);
  }

  Strand strand_;
  std::unique_ptr<KvCacheManager> manager_;
};

}  // namespace strata::actors
