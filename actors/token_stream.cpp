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

RequestStream::RequestStream(std::string id, int prompt_tokens, int n,
                             std::shared_ptr<EventChannel> ch, std::function<void()> on_abandon)
    : ch_(std::move(ch)), on_abandon_(std::move(on_abandon)), open_(n) {
  id_ = std::move(id);
  prompt_tokens_ = prompt_tokens;
}

RequestStream::~RequestStream() {
  if (open_.load() > 0 && on_abandon_) on_abandon_();
}

std::optional<StreamEvent> RequestStream::seen(StreamEvent ev) {
  if (ev.finish != FinishReason::kNone) open_.fetch_sub(1);
  return ev;
}

boost::asio::awaitable<std::optional<StreamEvent>> RequestStream::next() {
  if (open_.load() <= 0) co_return std::nullopt;
  auto [ec, ev] = co_await ch_->async_receive(boost::asio::as_tuple(boost::asio::use_awaitable));
  if (ec) {
    open_ = 0;
    co_return std::nullopt;
  }
  co_return seen(std::move(ev));
}

std::optional<StreamEvent> RequestStream::next_blocking() {
  if (open_.load() <= 0) return std::nullopt;
  std::optional<StreamEvent> got;
  if (ch_->try_receive([&](boost::system::error_code ec, StreamEvent ev) {
        if (!ec) got = std::move(ev);
      })) {
    if (got) return seen(std::move(*got));
  }
  // Nothing buffered: wait. The engine's io threads run until every stream got its finishes.
  auto done = std::make_shared<std::promise<std::optional<StreamEvent>>>();
  auto fut = done->get_future();
  ch_->async_receive([done](boost::system::error_code ec, StreamEvent ev) {
    if (ec) {
      done->set_value(std::nullopt);
    } else {
      done->set_value(std::move(ev));
    }
  });
  got = fut.get();
  if (!got) {
    open_ = 0;
    return std::nullopt;
  }
  return seen(std::move(*got));
}

}  // namespace strata::actors
