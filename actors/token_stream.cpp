#include "actors/token_stream.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <future>

#include "actors/actor.h"

namespace strata::actors {

std::shared_ptr<EventChannel> make_event_channel(boost::asio::io_context& io) {
  return std::make_shared<EventChannel>(io.get_executor(), kUnboundedMailbox);
}

void EventSink::send(StreamEvent ev) {
  if (ch_) ch_->try_send(boost::system::error_code{}, std::move(ev));
}

void EventSink::close() {
  if (ch_) ch_->close();
}

RequestStream::RequestStream(std::string id, int prompt_tokens, std::shared_ptr<EventChannel> ch,
                             std::function<void()> on_abandon)
    : ch_(std::move(ch)), on_abandon_(std::move(on_abandon)) {
  id_ = std::move(id);
  prompt_tokens_ = prompt_tokens;
}

RequestStream::~RequestStream() {
  if (!ended_.load() && ch_->is_open() && on_abandon_) on_abandon_();
}

std::pair<bool, std::optional<StreamEvent>> RequestStream::poll() {
  if (ended_.load()) return {true, std::nullopt};
  // Read is_open first: if it was closed then, every event was sent before, so an empty
  // channel now means the stream is over.
  const bool open = ch_->is_open();
  std::optional<StreamEvent> got;
  if (ch_->try_receive([&](boost::system::error_code ec, StreamEvent ev) {
        if (!ec) got = std::move(ev);
      })) {
    if (got) return {true, std::move(got)};
  }
  if (!open) {
    ended_ = true;
    return {true, std::nullopt};
  }
  return {false, std::nullopt};
}

boost::asio::awaitable<std::optional<StreamEvent>> RequestStream::next() {
  auto [ready, ev] = poll();
  if (ready) co_return std::move(ev);
  auto [ec, got] = co_await ch_->async_receive(boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) {
    ended_ = true;
    co_return std::nullopt;
  }
  co_return std::move(got);
}

std::optional<StreamEvent> RequestStream::next_blocking() {
  auto [ready, ev] = poll();
  if (ready) return ev;
  // The channel is open, so the engine (and its io threads) still runs: it closes every
  // stream's channel before its io_context stops.
  auto done = std::make_shared<std::promise<std::optional<StreamEvent>>>();
  auto fut = done->get_future();
  ch_->async_receive([done](boost::system::error_code ec, StreamEvent ev) {
    if (ec) {
      done->set_value(std::nullopt);
    } else {
      done->set_value(std::move(ev));
    }
  });
  auto got = fut.get();
  if (!got) ended_ = true;
  return got;
}

}  // namespace strata::actors
