// The route table: every HTTP route as data (path, allowed methods, the caller's credential,
// what it needs of the engine) and the handler it runs. dispatch() applies the table in one
// order for every route, so errors are uniform (docs/api.md "Routing"):
//
//   no route for the path                          -> 404 not_found
//   route's credential missing or wrong            -> 401 (API key: invalid_api_key, admin
//                                                     token: invalid_admin_token)
//   method not allowed                             -> 405 with Allow
//   engine needed but not set / server stopping    -> 503 not_ready / shutting_down
//   else the handler (it throws ApiError or anything to_api_error maps)
//
// Host, Origin and Content-Type (421/403/415) and the CORS preflight come first, for every
// path (Conn::handle); a WebSocket upgrade goes to the route marked `websocket`. Everything
// here runs on the server's I/O thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "api/server_impl.h"

namespace strata::api {

// Methods as a bit set.
using Methods = std::uint8_t;
inline constexpr Methods kGet = 1, kHead = 2, kPost = 4, kPut = 8;
inline constexpr Methods kGetHead = kGet | kHead;  // GET routes answer HEAD (body dropped)

enum class Auth : std::uint8_t {
  kNone,
  kApiKey,  // server.api_keys, when set: Authorization: Bearer <key>
  kAdmin,   // the admin token: Authorization: Bearer <token> or ?token=
};

enum class Needs : std::uint8_t {
  kNothing,
  kEngine,   // a loaded engine
  kServing,  // a loaded engine and a server not shutting down
};

struct RouteArgs {
  std::string_view path;   // without the query
  std::string_view query;  // after '?', "" when none
  std::string_view tail;   // prefix routes: what follows the prefix ("" for exact routes)
};

// Writes the response; returns false to close the connection. Throws to get an error
// response (dispatch catches).
using Handler = net::awaitable<bool> (*)(Conn& c, Req& req, const RouteArgs& args);

struct Route {
  std::string_view path;  // exact path, or with `prefix` every path starting with it
  bool prefix = false;
  Methods methods = kGetHead;
  Auth auth = Auth::kNone;
  Needs needs = Needs::kNothing;
  Handler handler = nullptr;
  bool websocket = false;  // the target of WebSocket upgrades
};

// The table, in match order (an exact route before a prefix route that covers it).
std::span<const Route> route_table();
const Route* find_route(std::string_view path);  // nullptr: 404
std::string allow_header(Methods m);             // "GET, HEAD, POST, PUT" order
bool allows(Methods m, http::verb v);

// Runs the table for one request (after Conn::handle's caller checks).
net::awaitable<bool> dispatch(Conn& c, Req& req);

// The handlers, by concept.
// handlers_info.cpp
net::awaitable<bool> handle_version(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_health(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_metrics(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_models(Conn& c, Req& req, const RouteArgs& a);  // list, or tail's
net::awaitable<bool> handle_ws_no_upgrade(Conn& c, Req& req, const RouteArgs& a);  // 426
// handlers_tokenize.cpp
net::awaitable<bool> handle_tokenize(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_detokenize(Conn& c, Req& req, const RouteArgs& a);
// handlers_completions.cpp
net::awaitable<bool> handle_completions(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_chat_completions(Conn& c, Req& req, const RouteArgs& a);
// handlers_admin.cpp
net::awaitable<bool> handle_admin_page(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_admin_profile(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_admin_stats(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_admin_config(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_admin_stream(Conn& c, Req& req, const RouteArgs& a);
net::awaitable<bool> handle_admin_quality(Conn& c, Req& req, const RouteArgs& a);

}  // namespace strata::api
