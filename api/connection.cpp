// The HTTP transport: one coroutine per connection (Conn::run) reading request heads and
// bodies under the deadlines and limits of api/server.h (408, 413, 431, 400, 501), keep-alive,
// the WebSocket upgrade hand-off, the lingering close; then Conn::handle's caller checks
// (421/403/415) and the CORS preflight, and the route table (api/routes.h) for the rest.
#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/json.hpp>

#include "api/routes.h"
#include "api/server_impl.h"

namespace strata::api {

namespace json = boost::json;
using net::as_tuple;
using net::use_awaitable;

// ---- Conn -----------------------------------------------------------------------------------

Conn::Conn(Server::Impl& s, tcp::socket so) : srv(s), sock(std::move(so)), timer(srv.io) {
  srv.conns.insert(this);
}

void Conn::set_deadline(Clock::duration d) {
  deadline = Clock::now() + d;
  timer.cancel();
}
void Conn::clear_deadline() {
  deadline = Clock::time_point::max();
  timer.cancel();
}
void Conn::close() {
  boost::system::error_code ec;
  sock.shutdown(tcp::socket::shutdown_both, ec);
  sock.close(ec);
  timer.cancel();
}

net::awaitable<void> Conn::watchdog() {
  auto self = shared_from_this();
  while (sock.is_open()) {
    if (deadline <= Clock::now()) {
      timed_out = true;
      deadline = Clock::time_point::max();
      boost::system::error_code ec;
      sock.cancel(ec);
    }
    timer.expires_at(deadline);
    co_await timer.async_wait(as_tuple(use_awaitable));
  }
}

net::awaitable<bool> Conn::write(Res res) {
  set_deadline(to_duration(srv.opt.server.write_timeout_s));
  auto [ec, n] = co_await http::async_write(sock, res, as_tuple(use_awaitable));
  clear_deadline();
  co_return !ec && res.keep_alive();
}

net::awaitable<void> Conn::run() {
  auto self = shared_from_this();
  const auto header_to = to_duration(srv.opt.server.header_timeout_s);
  // The first request's head must be complete within header_timeout_s of the accept (a
  // silent socket holds its slot no longer); a later one within header_timeout_s of its
  // first byte, after at most idle_timeout_s of keep-alive idleness.
  set_deadline(header_to);
  for (bool first = true;; first = false) {
    idle = true;
    waiting = true;
    waiting_since = Clock::now();
    if (srv.stopping) break;
    if (buf.size() == 0) {  // wait for the next request's first bytes (keep-alive idle)
      if (!first) set_deadline(to_duration(srv.opt.server.idle_timeout_s));
      auto [ec, n] = co_await sock.async_read_some(buf.prepare(4096), as_tuple(use_awaitable));
      if (ec) break;
      buf.commit(n);
    }
    idle = false;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(srv.opt.server.max_body_bytes);
    timed_out = false;
    if (!first) set_deadline(header_to);
    auto [hec, hn] = co_await http::async_read_header(sock, buf, parser, as_tuple(use_awaitable));
    Req dummy;  // for errors before a request exists: they close the connection
    dummy.keep_alive(false);
    if (hec) {
      clear_deadline();
      if (timed_out) {
        co_await write(srv.error_response(
            dummy, ApiError(408, "invalid_request_error",
                            "timed out reading the request header (server.header_timeout_s = " +
                                json::serialize(json::value(srv.opt.server.header_timeout_s)) + ")",
                            "", "request_timeout")));
      } else if (hec == http::error::body_limit) {  // Content-Length over the limit
        co_await write(srv.error_response(
            dummy, ApiError(413, "invalid_request_error",
                            "request body is over the limit of " +
                                std::to_string(srv.opt.server.max_body_bytes) + " bytes",
                            "", "payload_too_large")));
      } else if (hec == http::error::header_limit) {
        co_await write(srv.error_response(
            dummy, ApiError(431, "invalid_request_error", "request header too large")));
      } else if (hec != http::error::end_of_stream && hec != net::error::eof &&
                 hec != net::error::operation_aborted && hec != net::error::connection_reset) {
        co_await write(srv.error_response(
            dummy,
            ApiError(400, "invalid_request_error", "malformed HTTP request: " + hec.message())));
      }
      break;
    }
    auto& h = parser.get();
    if (const auto te = h.find(http::field::transfer_encoding);
        te != h.end() && !beast::iequals(te->value(), "chunked")) {
      clear_deadline();  // a coding stacked on chunked (gzip, chunked) would be read as plain
      co_await write(srv.error_response(
          dummy, ApiError(501, "invalid_request_error",
                          "Transfer-Encoding '" + std::string(te->value().substr(0, 64)) +
                              "' is not supported (only chunked)",
                          "", "unsupported_transfer_encoding")));
      break;
    }
    if (beast::websocket::is_upgrade(h)) {
      clear_deadline();
      const std::string target(h.target());
      const Route* route = find_route(std::string_view(target).substr(0, target.find('?')));
      if (!route || !route->websocket) {
        co_await write(srv.error_response(
            dummy, ApiError(404, "not_found_error", "no WebSocket endpoint at " + target)));
        break;
      }
      srv.conns.erase(this);
      ++srv.websockets;
      timer.cancel();
      Req up = parser.release();
      tcp::socket s = std::move(sock);
      co_await run_websocket(srv, std::move(s), std::move(up));
      --srv.websockets;
      co_return;
    }
    if (const auto len = h.payload_size(); len && *len > srv.opt.server.max_body_bytes) {
      clear_deadline();
      co_await write(srv.error_response(
          h, ApiError(413, "invalid_request_error",
                      "request body of " + std::to_string(*len) + " bytes is over the limit of " +
                          std::to_string(srv.opt.server.max_body_bytes) + " bytes",
                      "", "payload_too_large")));
      break;
    }
    set_deadline(std::max(header_to, to_duration(30)));
    auto [bec, bn] = co_await http::async_read(sock, buf, parser, as_tuple(use_awaitable));
    clear_deadline();
    if (bec) {
      if (bec == http::error::body_limit) {
        co_await write(srv.error_response(
            dummy, ApiError(413, "invalid_request_error",
                            "request body is over the limit of " +
                                std::to_string(srv.opt.server.max_body_bytes) + " bytes",
                            "", "payload_too_large")));
      } else if (timed_out) {
        co_await write(srv.error_response(
            dummy, ApiError(408, "invalid_request_error", "timed out reading the request body", "",
                            "request_timeout")));
      } else if (bec != http::error::partial_message && bec != net::error::eof &&
                 bec != net::error::operation_aborted && bec != net::error::connection_reset) {
        co_await write(srv.error_response(  // a bad chunk size or framing
            dummy,
            ApiError(400, "invalid_request_error", "malformed request body: " + bec.message())));
      }
      break;
    }
    Req req = parser.release();
    waiting = false;
    bool keep = false;
    try {
      keep = co_await handle(req);
    } catch (...) {
      // note: handlers turn errors into responses; this is the last line of defence.
      keep = false;
    }
    if (!keep || !sock.is_open()) break;
  }
  waiting = true;
  // Lingering close: stop sending, then drain what the client still sends (an oversized body)
  // for a moment, so the kernel does not answer it with a reset that would destroy our reply.
  if (sock.is_open()) {
    boost::system::error_code ec;
    sock.shutdown(tcp::socket::shutdown_send, ec);
    set_deadline(std::chrono::seconds(2));
    std::size_t drained = 0;
    char tmp[8192];
    while (drained < (8u << 20)) {
      auto [rec, n] = co_await sock.async_read_some(net::buffer(tmp), as_tuple(use_awaitable));
      if (rec) break;
      drained += n;
    }
  }
  close();
  srv.conns.erase(this);
}

net::awaitable<bool> Conn::handle(Req& req) {
  const std::string_view target = req.target();
  if (auto refused = srv.refuse_caller(req, target.substr(0, target.find('?'))))
    co_return co_await write(srv.error_response(req, *refused));
  if (req.method() == http::verb::options) {  // CORS preflight, whatever the path
    Res res = srv.response(req, http::status::no_content, "");
    res.set(http::field::access_control_allow_methods, "GET, POST, PUT, OPTIONS");
    res.set(http::field::access_control_allow_headers, "authorization, content-type");
    res.set(http::field::access_control_max_age, "600");
    co_return co_await write(std::move(res));
  }
  co_return co_await dispatch(*this, req);
}

}  // namespace strata::api
