// The route table (api/routes.h), table-driven: the table says what docs/api.md says, and the
// server applies it uniformly over real sockets — every route answers every method it does not
// allow with 405 and the route's Allow header, every route that needs a credential answers 401
// without it (and with a wrong one), and paths that are no route answer 404, with or without
// credentials and whatever the method.
#include "api/routes.h"

#include <set>

#include "tests/api/server_fixture.h"

namespace strata::api {
namespace {

using test::ServerTest;

struct Expected {
  const char* path;
  bool prefix;
  const char* allow;  // the Allow header of a 405
  Auth auth;
  const char* sample;  // a request path the route serves
};

// What docs/api.md documents.
const std::vector<Expected> kExpected = {
    {"/v1/completions", false, "POST", Auth::kApiKey, "/v1/completions"},
    {"/v1/chat/completions", false, "POST", Auth::kApiKey, "/v1/chat/completions"},
    {"/v1/models", false, "GET, HEAD", Auth::kApiKey, "/v1/models"},
    {"/v1/models/", true, "GET, HEAD", Auth::kApiKey, "/v1/models/fake"},
    {"/tokenize", false, "POST", Auth::kApiKey, "/tokenize"},
    {"/detokenize", false, "POST", Auth::kApiKey, "/detokenize"},
    {"/v1/ws", false, "GET", Auth::kApiKey, "/v1/ws"},
    {"/version", false, "GET, HEAD", Auth::kNone, "/version"},
    {"/health", false, "GET, HEAD", Auth::kNone, "/health"},
    {"/metrics", false, "GET, HEAD", Auth::kNone, "/metrics"},
    {"/admin", false, "GET, HEAD", Auth::kAdmin, "/admin"},
    {"/admin/", false, "GET, HEAD", Auth::kAdmin, "/admin/"},
    {"/admin/api/profile", false, "GET, HEAD, POST, PUT", Auth::kAdmin, "/admin/api/profile"},
    {"/admin/api/stats", false, "GET, HEAD", Auth::kAdmin, "/admin/api/stats"},
    {"/admin/api/config", false, "GET, HEAD", Auth::kAdmin, "/admin/api/config"},
    {"/admin/api/quality", false, "GET, HEAD", Auth::kAdmin, "/admin/api/quality"},
    {"/admin/api/stream", false, "GET", Auth::kAdmin, "/admin/api/stream"},
};

const std::vector<http::verb> kVerbs = {http::verb::get, http::verb::head,    http::verb::post,
                                        http::verb::put, http::verb::delete_, http::verb::patch};

TEST(RouteTable, IsWhatTheDocsSay) {
  const auto table = route_table();
  ASSERT_EQ(table.size(), kExpected.size());
  for (std::size_t i = 0; i < table.size(); ++i) {
    SCOPED_TRACE(kExpected[i].path);
    EXPECT_EQ(table[i].path, kExpected[i].path);
    EXPECT_EQ(table[i].prefix, kExpected[i].prefix);
    EXPECT_EQ(allow_header(table[i].methods), kExpected[i].allow);
    EXPECT_EQ(table[i].auth, kExpected[i].auth);
    EXPECT_NE(table[i].handler, nullptr);
    EXPECT_EQ(find_route(kExpected[i].sample), &table[i]);
  }
  // Only /v1/ws takes upgrades; the exact /v1/models is matched before its prefix route.
  for (const auto& r : table) EXPECT_EQ(r.websocket, r.path == "/v1/ws") << r.path;
  EXPECT_EQ(find_route("/v1/models")->prefix, false);
  for (const char* p : {"/", "/nothing", "/v1", "/v1/model", "/v1/modelsx", "/adminx", "/admin/api",
                        "/admin/api/", "/admin/api/profiles", "/tokenize/", "/health/x"})
    EXPECT_EQ(find_route(p), nullptr) << p;
}

TEST(RouteTable, AllowHeaderAndMethods) {
  EXPECT_EQ(allow_header(kGetHead | kPut | kPost), "GET, HEAD, POST, PUT");
  EXPECT_EQ(allow_header(kPost), "POST");
  EXPECT_TRUE(allows(kGetHead, http::verb::head));
  EXPECT_FALSE(allows(kGet, http::verb::head));
  EXPECT_FALSE(allows(kGetHead | kPut | kPost, http::verb::delete_));
}

class RoutesServerTest : public ServerTest {
 protected:
  ServerOptions options() const override {
    auto o = ServerTest::options();
    o.server.api_keys = {"key-1"};
    return o;
  }
  // One request on a fresh connection (a HEAD response has no body to read).
  http::response<http::string_body> send(http::verb v, const std::string& target,
                                         const std::string& auth) {
    auto s = connect();
    http::request<http::string_body> req{v, target, 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::content_type, "application/json");
    if (!auth.empty()) req.set(http::field::authorization, "Bearer " + auth);
    if (v == http::verb::post || v == http::verb::put || v == http::verb::patch) req.body() = "{}";
    req.prepare_payload();
    http::write(s, req);
    http::response_parser<http::string_body> p;
    p.skip(v == http::verb::head);
    beast::flat_buffer b;
    http::read(s, b, p);
    return p.release();
  }
  static std::string credential(Auth a) {
    return a == Auth::kApiKey ? "key-1" : a == Auth::kAdmin ? "secret" : "";
  }
};

TEST_F(RoutesServerTest, EveryRouteAnswersAWrongMethodWith405AndItsAllowHeader) {
  ready();
  int checked = 0;
  for (const auto& e : kExpected) {
    const Route* route = find_route(e.sample);
    ASSERT_NE(route, nullptr) << e.sample;
    for (const auto v : kVerbs) {
      if (allows(route->methods, v)) continue;
      SCOPED_TRACE(std::string(http::to_string(v)) + " " + e.sample);
      const auto r = send(v, e.sample, credential(e.auth));
      EXPECT_EQ(r.result_int(), 405);
      EXPECT_EQ(r[http::field::allow], e.allow);
      if (v != http::verb::head) {
        EXPECT_EQ(error_of(r).at("code"), "method_not_allowed");
        EXPECT_EQ(error_of(r).at("type"), "invalid_request_error");
      }
      ++checked;
    }
  }
  EXPECT_GE(checked, 60);
}

TEST_F(RoutesServerTest, EveryRouteThatNeedsACredentialAnswers401WithoutIt) {
  ready();
  for (const auto& e : kExpected) {
    const Route* route = find_route(e.sample);
    ASSERT_NE(route, nullptr) << e.sample;
    for (const auto v : kVerbs) {
      SCOPED_TRACE(std::string(http::to_string(v)) + " " + e.sample);
      if (e.auth == Auth::kNone) {
        if (allows(route->methods, v)) {
          EXPECT_NE(send(v, e.sample, "").result_int(), 401);
        }
        continue;
      }
      // Before the method is looked at: a wrong method without the credential is a 401 too.
      for (const std::string& bad :
           {std::string(), std::string("wrong"),
            credential(e.auth == Auth::kApiKey ? Auth::kAdmin : Auth::kApiKey)}) {
        const auto r = send(v, e.sample, bad);
        EXPECT_EQ(r.result_int(), 401) << "credential '" << bad << "'";
        EXPECT_EQ(r[http::field::www_authenticate], "Bearer");
        if (v != http::verb::head) {
          EXPECT_EQ(error_of(r).at("code"),
                    e.auth == Auth::kApiKey ? "invalid_api_key" : "invalid_admin_token");
        }
      }
    }
  }
  // With the credential (and an allowed method that ends), no 401.
  EXPECT_EQ(send(http::verb::get, "/v1/models", "key-1").result_int(), 200);
  EXPECT_EQ(send(http::verb::get, "/admin/api/stats", "secret").result_int(), 200);
  EXPECT_EQ(send(http::verb::get, "/admin/api/stats?token=secret", "").result_int(), 200);
}

TEST_F(RoutesServerTest, PathsThatAreNoRouteAnswer404WhateverTheMethodAndCredential) {
  ready();
  for (const char* path : {"/nothing", "/v1", "/v1/completion", "/v1/modelsx", "/adminx",
                           "/admin/api", "/admin/api/unknown", "/tokenize/x", "/health/"}) {
    for (const auto v : kVerbs) {
      for (const std::string& auth : {std::string(), std::string("key-1"), std::string("secret")}) {
        SCOPED_TRACE(std::string(http::to_string(v)) + " " + path + " auth '" + auth + "'");
        const auto r = send(v, path, auth);
        EXPECT_EQ(r.result_int(), 404);
        if (v != http::verb::head) {
          EXPECT_EQ(error_of(r).at("code"), "not_found");
          EXPECT_EQ(error_of(r).at("type"), "not_found_error");
        }
      }
    }
  }
}

TEST_F(RoutesServerTest, EngineRoutesAnswer503BeforeTheEngineAndAfterTheMethod) {
  // No ready(): the engine is not set.
  auto r = send(http::verb::post, "/v1/completions", "key-1");
  EXPECT_EQ(r.result_int(), 503);
  EXPECT_EQ(error_of(r).at("code"), "not_ready");
  r = send(http::verb::get, "/admin/api/stats", "secret");
  EXPECT_EQ(r.result_int(), 503);
  EXPECT_EQ(error_of(r).at("code"), "not_ready");
  EXPECT_EQ(send(http::verb::get, "/v1/completions", "key-1").result_int(), 405);
  EXPECT_EQ(send(http::verb::get, "/admin", "secret").result_int(), 200);  // the page needs none
  EXPECT_EQ(send(http::verb::get, "/version", "").result_int(), 200);
}

}  // namespace
}  // namespace strata::api
