// GET /admin/api/quality: the live quality guardrail's report (api/quality_json.h). The route
// table (api/routes.cpp) checks the admin token and the method first.
#include <boost/json.hpp>

#include "api/quality_json.h"
#include "api/routes.h"

namespace strata::api {

net::awaitable<bool> handle_admin_quality(Conn& c, Req& req, const RouteArgs&) {
  Server::Impl& srv = c.srv;
  co_return co_await c.write(srv.response(
      req, http::status::ok, boost::json::serialize(quality_json(srv.engine->stats()))));
}

}  // namespace strata::api
