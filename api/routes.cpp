// The route table and the one dispatcher that applies it (api/routes.h).
#include "api/routes.h"

#include <array>

namespace strata::api {

namespace {

using enum Auth;
using enum Needs;

constexpr Methods kGetHeadPostPut = kGetHead | kPost | kPut;

// clang-format off
constexpr std::array kRoutes = {
  //    path                    prefix methods          auth     needs     handler
  Route{"/v1/completions",      false, kPost,           kApiKey, kServing, handle_completions},
  Route{"/v1/chat/completions", false, kPost,           kApiKey, kServing, handle_chat_completions},
  Route{"/v1/models",           false, kGetHead,        kApiKey, kServing, handle_models},
  Route{"/v1/models/",          true,  kGetHead,        kApiKey, kServing, handle_models},
  Route{"/tokenize",            false, kPost,           kApiKey, kServing, handle_tokenize},
  Route{"/detokenize",          false, kPost,           kApiKey, kServing, handle_detokenize},
  Route{"/v1/ws",               false, kGet,            kApiKey, kNothing, handle_ws_no_upgrade,
        /*websocket=*/true},
  Route{"/version",             false, kGetHead,        kNone,   kNothing, handle_version},
  Route{"/health",              false, kGetHead,        kNone,   kNothing, handle_health},
  Route{"/metrics",             false, kGetHead,        kNone,   kNothing, handle_metrics},
  Route{"/admin",               false, kGetHead,        kAdmin,  kNothing, handle_admin_page},
  Route{"/admin/",              false, kGetHead,        kAdmin,  kNothing, handle_admin_page},
  Route{"/admin/api/profile",   false, kGetHeadPostPut, kAdmin,  kEngine,  handle_admin_profile},
  Route{"/admin/api/stats",     false, kGetHead,        kAdmin,  kEngine,  handle_admin_stats},
  Route{"/admin/api/config",    false, kGetHead,        kAdmin,  kEngine,  handle_admin_config},
  Route{"/admin/api/quality",   false, kGetHead,        kAdmin,  kEngine,  handle_admin_quality},
  // An event stream: GET only (a HEAD would have to end a stream that never ends).
  Route{"/admin/api/stream",    false, kGet,            kAdmin,  kEngine,  handle_admin_stream},
};
// clang-format on

Methods method_bit(http::verb v) {
  switch (v) {
    case http::verb::get:
      return kGet;
    case http::verb::head:
      return kHead;
    case http::verb::post:
      return kPost;
    case http::verb::put:
      return kPut;
    default:
      return 0;
  }
}

}  // namespace

std::span<const Route> route_table() {
  return kRoutes;
}

const Route* find_route(std::string_view path) {
  for (const Route& r : kRoutes)
    if (r.prefix ? path.starts_with(r.path) : path == r.path) return &r;
  return nullptr;
}

bool allows(Methods m, http::verb v) {
  return (m & method_bit(v)) != 0;
}

std::string allow_header(Methods m) {
  std::string out;
  for (const auto& [bit, name] : {std::pair{kGet, "GET"}, std::pair{kHead, "HEAD"},
                                  std::pair{kPost, "POST"}, std::pair{kPut, "PUT"}}) {
    if (!(m & bit)) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

net::awaitable<bool> dispatch(Conn& c, Req& req) {
  Server::Impl& srv = c.srv;
  const std::string_view target = req.target();
  const auto q = target.find('?');
  RouteArgs args;
  args.path = target.substr(0, q);
  args.query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  std::optional<ApiError> err;
  std::string allow;  // the Allow header of a 405
  try {
    const Route* route = find_route(args.path);
    if (!route)
      throw ApiError(404, "not_found_error",
                     "no route for " + std::string(req.method_string()) + " " + clip(args.path), "",
                     "not_found");
    if (route->prefix) args.tail = args.path.substr(route->path.size());
    if (route->auth == Auth::kApiKey && !srv.api_key_ok(req))
      throw ApiError(401, "authentication_error",
                     "a valid API key is required (Authorization: Bearer <key>)", "",
                     "invalid_api_key");
    if (route->auth == Auth::kAdmin && !srv.admin_ok(req, args.query))
      throw ApiError(401, "authentication_error",
                     "the admin console needs the admin token (Authorization: Bearer <token> or "
                     "?token=<token>); `strata serve` prints it at start",
                     "", "invalid_admin_token");
    if (!allows(route->methods, req.method())) {
      allow = allow_header(route->methods);
      throw ApiError(405, "invalid_request_error",
                     "method " + std::string(req.method_string()) + " not allowed on " +
                         clip(args.path) + " (allowed: " + allow + ")",
                     "", "method_not_allowed");
    }
    if (route->needs != Needs::kNothing && !srv.engine)
      throw ApiError(503, "unavailable_error",
                     srv.load_error.empty() ? "the model is loading"
                                            : "model failed to load: " + srv.load_error,
                     "", "not_ready");
    if (route->needs == Needs::kServing && srv.stopping)
      throw ApiError(503, "unavailable_error", "the server is shutting down", "", "shutting_down");
    co_return co_await route->handler(c, req, args);
  } catch (...) {
    err = to_api_error(std::current_exception());  // no co_await inside a handler
  }
  Res res = srv.error_response(req, *err);
  if (err->status == 405 && !allow.empty()) res.set(http::field::allow, allow);
  co_return co_await c.write(std::move(res));
}

}  // namespace strata::api
