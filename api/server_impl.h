// Internal to api/: the server's state and the pieces shared by server.cpp (state, responses,
// caller checks, stop), accept.cpp (admission), connection.cpp (the HTTP transport), routes.cpp
// (the route table), handlers_*.cpp (the routes), websocket.cpp (/v1/ws). Everything here runs
// on the server's single I/O thread (but the jobs handed to offload()).
#pragma once

// GCC 12 at -O2 reports asio's awaitable frame operator delete as mismatched with its operator new
// (-Wmismatched-new-delete, a known false positive on coroutine frames; actors/actor.h has the
// same): the transport's coroutines (connection.cpp, accept.cpp, websocket.cpp) need it too.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "api/api_error.h"
#include "api/metrics.h"
#include "api/openai_request.h"
#include "api/origin_policy.h"
#include "api/server.h"

namespace strata::api {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Req = http::request<http::string_body>;
using Res = http::response<http::string_body>;
using Clock = std::chrono::steady_clock;

struct Conn;

struct Server::Impl {
  explicit Impl(ServerOptions o);

  ServerOptions opt;
  OriginPolicy policy{opt.server};
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::signal_set signals{io};
  std::shared_ptr<Engine> engine;  // null while loading
  std::string load_error;
  ApiMetrics metrics;
  std::set<Conn*> conns;
  int websockets = 0;
  std::map<void*, std::function<void()>> ws_closers;  // close a socket with nothing in flight
  bool stopping = false;
  std::string admin_token;
  unsigned short bound_port = 0;
  // Work too long for the I/O thread (tokenizing and parsing megabyte prompts): run there,
  // resumed here. Declared after `io` so that it is joined before coroutine frames go.
  net::thread_pool blocking{2};
  Clock::time_point started = Clock::now();
  std::optional<net::steady_timer> status_timer;  // cancelled by begin_stop

  // One operator log line (opt.log, else stderr).
  void log(const std::string& line) const;
  // The engine status line every opt.server.status_log_interval_s (api/status_log.h).
  net::awaitable<void> status_log_loop();

  // accept.cpp: accepts, applies the connection cap (evicting the connection that has waited
  // longest for its request head, else 503) and the per-socket options.
  net::awaitable<void> accept_loop();
  bool evict_one_waiting();

  // Runs job() on `blocking` and resumes on the I/O thread; rethrows what it throws.
  // note: pass a named std::function (GCC 12 destroys temporaries of a co_await twice).
  net::awaitable<void> offload(const std::function<void()>& job);
  void begin_stop();
  net::awaitable<void> drain();

  std::string new_id(const char* prefix);
  ParseContext parse_context() const;              // engine must be set
  std::string token_bytes(std::int32_t id) const;  // raw (logprobs), "" when unknown

  // Response helpers (CORS, keep-alive, server header; counts the status in metrics).
  Res response(const Req& req, http::status st, std::string body,
               const char* content_type = "application/json");
  Res error_response(const Req& req, const ApiError& e);
  void decorate(const Req& req, http::fields& f) const;  // CORS
  // 421 (Host names another server), 403 (Origin not allowed), 415 (POST/PUT not JSON).
  std::optional<ApiError> refuse_caller(const Req& req, std::string_view path) const;
  bool api_key_ok(const Req& req) const;
  bool admin_ok(const Req& req, std::string_view query) const;
};

// One HTTP connection. Deadlines are enforced by a watchdog that cancels the socket's
// pending operations (the socket stays open, so a 408 can still be written).
struct Conn : std::enable_shared_from_this<Conn> {
  Conn(Server::Impl& s, tcp::socket sock);
  Server::Impl& srv;
  tcp::socket sock;
  net::steady_timer timer;
  Clock::time_point deadline = Clock::time_point::max();
  bool timed_out = false;
  bool idle = true;     // between requests: a graceful stop may close it
  bool waiting = true;  // no request in hand (idle or reading a head): may be evicted
  Clock::time_point waiting_since = Clock::now();
  beast::flat_buffer buf;  // bytes read ahead of the current request

  void set_deadline(Clock::duration d);
  void clear_deadline();
  void close();
  net::awaitable<void> watchdog();
  net::awaitable<void> run();
  net::awaitable<bool> write(Res res);  // false: the client is gone
  // Caller checks and the CORS preflight, then the route table; false: close the connection.
  net::awaitable<bool> handle(Req& req);
  // Inference with SSE or JSON; aborts the engine request if the client disconnects.
  net::awaitable<bool> completions(Req& req, Endpoint endpoint);
  // Reads beside a response; a client gone aborts `request_ids` (a batch: one per prompt).
  net::awaitable<void> watch_close(const std::vector<std::string>& request_ids, std::string* side,
                                   bool* gone);
};

// websocket.cpp: takes over the socket after the upgrade request.
net::awaitable<void> run_websocket(Server::Impl& srv, tcp::socket sock, Req req);

double seconds(double s);  // clamps config seconds to a sane positive duration
Clock::duration to_duration(double seconds);
std::string query_param(std::string_view query, std::string_view key);  // "" when absent
std::string clip(std::string_view s);  // client input echoed in a message: 64 bytes at most

}  // namespace strata::api
