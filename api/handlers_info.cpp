// The small read-only routes: /version, /health, /metrics, /v1/models[/{id}], and /v1/ws
// reached without a WebSocket upgrade.
#include <boost/json.hpp>
#include <ctime>

#include "api/routes.h"
#include "api/version.h"

namespace strata::api {

namespace json = boost::json;

namespace {
net::awaitable<bool> reply(Conn& c, const Req& req, std::string body,
                           const char* content_type = "application/json") {
  co_return co_await c.write(c.srv.response(req, http::status::ok, std::move(body), content_type));
}
}  // namespace

net::awaitable<bool> handle_version(Conn& c, Req& req, const RouteArgs&) {
  json::object v;  // note: no braced temporaries in a co_await (GCC 12 rejects them)
  v["version"] = kVersion;
  co_return co_await reply(c, req, json::serialize(v));
}

net::awaitable<bool> handle_health(Conn& c, Req& req, const RouteArgs&) {
  const Server::Impl& srv = c.srv;
  if (!srv.load_error.empty())
    throw ApiError(503, "unavailable_error", "model failed to load: " + srv.load_error, "",
                   "load_failed");
  if (!srv.engine) throw ApiError(503, "unavailable_error", "the model is loading", "", "loading");
  if (srv.stopping)
    throw ApiError(503, "unavailable_error", "the server is shutting down", "", "shutting_down");
  co_return co_await reply(c, req, R"({"status":"ok"})");
}

net::awaitable<bool> handle_metrics(Conn& c, Req& req, const RouteArgs&) {
  Server::Impl& srv = c.srv;
  std::optional<EngineStats> st;
  std::vector<LayerRule> rules;
  MetricsInput in;
  in.model_name = srv.opt.model_name;
  in.ready = srv.engine != nullptr;
  if (srv.engine) {
    st = srv.engine->stats();
    in.stats = &*st;
    try {
      rules = st->profile.resolve(srv.engine->model().num_hidden_layers);
      in.rules = &rules;
    } catch (const std::exception&) {
    }
  }
  co_return co_await reply(c, req, render_metrics(srv.metrics, in),
                           "text/plain; version=0.0.4; charset=utf-8");
}

net::awaitable<bool> handle_models(Conn& c, Req& req, const RouteArgs& a) {
  Server::Impl& srv = c.srv;
  json::object m;
  m["id"] = srv.opt.model_name;
  m["object"] = "model";
  m["created"] = static_cast<std::int64_t>(std::time(nullptr));
  m["owned_by"] = "strata";
  m["root"] = srv.engine->config().model.path;
  m["max_model_len"] = srv.parse_context().max_model_len;
  if (!a.tail.empty()) {  // /v1/models/{id}: that model, if it is the one served
    if (a.tail != srv.opt.model_name) throw model_not_found(clip(a.tail), srv.opt.model_name);
    co_return co_await reply(c, req, json::serialize(m));
  }
  json::object list;
  list["object"] = "list";
  list["data"] = json::array{std::move(m)};
  co_return co_await reply(c, req, json::serialize(list));
}

net::awaitable<bool> handle_ws_no_upgrade(Conn&, Req&, const RouteArgs&) {
  throw ApiError(426, "invalid_request_error", "/v1/ws needs a WebSocket upgrade");
  co_return false;  // a coroutine needs a co_ statement
}

}  // namespace strata::api
