// A request's token stream: the batcher produces StreamEvents into a channel, the client
// consumes them through `TokenStream` (actors/request.h). The channel is unbounded in
// practice (a request produces at most n * (max_tokens + 1) events), so the batcher never
// waits on a slow client. The stream ends after the finish event of each of its n choices
// (the channel is never closed: asio 1.81's close() drops buffered messages); the engine
// guarantees every choice a finish event, on shutdown too.
//
// Threading: `EventSink` is used from the batcher's strand only; `RequestStream` by one
// client at a time from any thread or coroutine. Dropping an unfinished stream aborts the
// request (a client that goes away frees its pages within one step).
#pragma once

#include <atomic>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/asio/io_context.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/request.h"

namespace strata::actors {

using EventChannel =
    boost::asio::experimental::concurrent_channel<void(boost::system::error_code, StreamEvent)>;

std::shared_ptr<EventChannel> make_event_channel(boost::asio::io_context& io);

// Producer side.
class EventSink {
 public:
  EventSink() = default;
  explicit EventSink(std::shared_ptr<EventChannel> ch) : ch_(std::move(ch)) {}
  void send(StreamEvent ev);  // never blocks
  bool valid() const { return ch_ != nullptr; }

 private:
  std::shared_ptr<EventChannel> ch_;
};

class RequestStream final : public TokenStream {
 public:
  // `on_abandon` runs when the stream is destroyed before every choice finished.
  RequestStream(std::string id, int prompt_tokens, int n, std::shared_ptr<EventChannel> ch,
                std::function<void()> on_abandon);
  ~RequestStream() override;
  boost::asio::awaitable<std::optional<StreamEvent>> next() override;
  std::optional<StreamEvent> next_blocking() override;

 private:
  std::optional<StreamEvent> seen(StreamEvent ev);  // counts finishes

  std::shared_ptr<EventChannel> ch_;
  std::function<void()> on_abandon_;
  std::atomic<int> open_;  // choices without a finish event yet
};

}  // namespace strata::actors
