// Admission: the accept loop, the connection cap and the options of accepted sockets; and
// the pool for work too long for the I/O thread.
//
// At the cap, a new connection first evicts the open connection that has waited longest for
// a request head (idle keep-alive, silent or trickling sockets: no request in hand), so that
// sockets that send nothing cannot lock clients out for header_timeout_s; only when every
// slot holds a request in progress (or a WebSocket) is the newcomer refused with 503.
#include "api/server_impl.h"

namespace strata::api {

using net::as_tuple;
using net::use_awaitable;

bool Server::Impl::evict_one_waiting() {
  Conn* oldest = nullptr;
  for (Conn* c : conns)
    if (c->waiting && (!oldest || c->waiting_since < oldest->waiting_since)) oldest = c;
  if (!oldest) return false;
  oldest->close();  // its coroutine ends on its own; the slot is free now
  conns.erase(oldest);
  return true;
}

net::awaitable<void> Server::Impl::offload(const std::function<void()>& job) {
  co_await net::co_spawn(
      blocking,
      [&job]() -> net::awaitable<void> {
        job();
        co_return;
      },
      use_awaitable);
}

net::awaitable<void> Server::Impl::accept_loop() {
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(as_tuple(use_awaitable));
    if (ec) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
      continue;  // EMFILE and friends: keep serving the others
    }
    // Streamed tokens are small writes: without this, each waits behind Nagle's algorithm
    // for the client's delayed ACK (~40 ms on a reused keep-alive connection).
    boost::system::error_code opt_ec;
    sock.set_option(tcp::no_delay(true), opt_ec);
    if (static_cast<int>(conns.size()) + websockets >= opt.server.max_connections &&
        !evict_one_waiting()) {
      // Over the cap: answer 503 without reading the request, then close.
      auto body = std::make_shared<std::string>(
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: "
          "1\r\nConnection: close\r\nContent-Length: ");
      const std::string err =
          error_json(ApiError(503, "unavailable_error",
                              "too many open connections (server.max_connections = " +
                                  std::to_string(opt.server.max_connections) + ")",
                              "", "too_many_connections"));
      *body += std::to_string(err.size()) + "\r\n\r\n" + err;
      auto s = std::make_shared<tcp::socket>(std::move(sock));
      net::async_write(*s, net::buffer(*body), [s, body](boost::system::error_code, std::size_t) {
        boost::system::error_code ignored;
        s->shutdown(tcp::socket::shutdown_both, ignored);
        s->close(ignored);
      });
      metrics.observe_http(503);
      continue;
    }
    auto c = std::make_shared<Conn>(*this, std::move(sock));
    net::co_spawn(io, c->watchdog(), [c](std::exception_ptr) {});
    net::co_spawn(io, c->run(), [c](std::exception_ptr) {});
  }
}

}  // namespace strata::api
