// The actor base: an actor owns its state and an Asio strand; messages arrive in a
// mailbox (an `asio::experimental::concurrent_channel`, so any thread may `tell`), and the
// body is one C++20 coroutine that receives and handles them one at a time on the strand.
// `stop()`/`cancel()` close the mailbox (messages still queued are dropped: asio 1.81's
// channel close discards its buffer); the loop ends, `on_stop()` runs on the strand and
// `wait()` returns.
//
// Threading: tell/stop/cancel/wait are thread-safe; handle() and on_stop() run on the strand
// only, so an actor's members need no locks. Nothing but messages crosses between actors.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <future>
#include <limits>
#include <utility>

// GCC 12 at -O2 reports asio's awaitable frame operator delete as mismatched with its
// operator new (-Wmismatched-new-delete, a known false positive on coroutine frames), which
// -Werror turns into a build failure in every file that defines a coroutine.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace strata::actors {

namespace asio = boost::asio;
using Strand = asio::strand<asio::io_context::executor_type>;

// A mailbox without a practical bound: asio's channel buffer is a deque, the capacity
// is only a limit. Bounded mailboxes (backpressure) pass a real capacity.
inline constexpr std::size_t kUnboundedMailbox = std::numeric_limits<std::size_t>::max() / 2;

template <class Msg>
class Actor {
 public:
  using Mailbox = asio::experimental::concurrent_channel<void(boost::system::error_code, Msg)>;

  explicit Actor(asio::io_context& io, std::size_t capacity = kUnboundedMailbox)
      : strand_(asio::make_strand(io)), mailbox_(strand_, capacity) {}
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  // Spawns the receive loop on the strand. Call once.
  void start() {
    asio::co_spawn(strand_, loop(), [this](std::exception_ptr) { done_.set_value(); });
  }
  // Thread-safe. False when the mailbox is closed or full: the message was not queued.
  bool tell(Msg m) { return mailbox_.try_send(boost::system::error_code{}, std::move(m)); }
  // Thread-safe: ends the loop after the message being handled; queued ones are dropped.
  void stop() { cancel(); }
  void cancel() {
    asio::post(strand_, [this] {
      mailbox_.cancel();
      mailbox_.close();
    });
  }
  // Blocks until the loop ended (call after stop/cancel, from a thread outside the io_context).
  void wait() { finished_.wait(); }
  const Strand& strand() const { return strand_; }

 protected:
  // One message, on the strand. An exception is reported and the loop continues: a bad
  // message must not take the actor down.
  virtual asio::awaitable<void> handle(Msg msg) = 0;
  // After the loop ended, on the strand.
  virtual asio::awaitable<void> on_stop() { co_return; }
  virtual const char* actor_name() const = 0;

  Strand strand_;
  Mailbox mailbox_;

 private:
  asio::awaitable<void> loop() {
    for (;;) {
      auto [ec, msg] = co_await mailbox_.async_receive(asio::as_tuple(asio::use_awaitable));
      if (ec) break;  // closed (and drained) or cancelled
      try {
        co_await handle(std::move(msg));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "strata: %s: %s\n", actor_name(), e.what());
      }
    }
    try {
      co_await on_stop();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: %s stopping: %s\n", actor_name(), e.what());
    }
  }

  std::promise<void> done_;
  std::shared_future<void> finished_ = done_.get_future().share();
};

}  // namespace strata::actors
