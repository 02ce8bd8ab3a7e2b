// The HTTP/WebSocket server against an Engine test double (a deterministic token generator
// on its own thread): SSE and JSON shapes over a real socket, keep-alive, limits, errors,
// abort on disconnect, WebSocket events, graceful stop. The real engine is exercised by the
// script tests (tests/scripts/api_node.cmake).
#include <gtest/gtest.h>

#include "tests/api/server_fixture.h"

namespace strata::api {
namespace {

using namespace strata::api::test;

TEST_F(ServerTest, HealthIs503UntilTheEngineIsSet) {
  auto r = get("/health");
  EXPECT_EQ(r.result_int(), 503);
  EXPECT_EQ(error_of(r).at("code"), "loading");
  EXPECT_EQ(post("/v1/completions", R"({"prompt":"x"})").result_int(), 503);
  ready();
  EXPECT_EQ(get("/health").result_int(), 200);
}

TEST_F(ServerTest, StreamsSseOverKeepAliveThenServesJson) {
  ready();
  auto s = connect();
  auto r =
      request(s, http::verb::post, "/v1/chat/completions",
              R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"n":2,"stream":true,
                       "stream_options":{"include_usage":true}})");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(r[http::field::content_type], "text/event-stream");
  const std::string& b = r.body();
  EXPECT_EQ(b.rfind("data: {", 0), 0u);
  EXPECT_NE(b.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(b.find("\"content\":\"t0 \""), std::string::npos);
  std::size_t finishes = 0;
  for (auto p = b.find("\"finish_reason\":\"length\""); p != std::string::npos;
       p = b.find("\"finish_reason\":\"length\"", p + 1))
    ++finishes;
  EXPECT_EQ(finishes, 2u);
  EXPECT_NE(b.find("\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":6"),
            std::string::npos)
      << b;
  EXPECT_EQ(b.substr(b.size() - 14), "data: [DONE]\n\n");
  // Same connection: a JSON completion.
  r = request(s, http::verb::post, "/v1/completions",
              R"({"prompt":[1,2],"max_tokens":2,"logprobs":1})");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  const auto j = json::parse(r.body());
  EXPECT_EQ(j.at("choices").at(0).at("text"), "t0 t1 ");
  EXPECT_EQ(j.at("choices").at(0).at("logprobs").at("token_logprobs").as_array().size(), 2u);
  EXPECT_EQ(j.at("usage").at("prompt_tokens").as_int64(), 2);
  EXPECT_EQ(engine_->live(), 0);
}

TEST_F(ServerTest, ErrorsHaveStatusAndMessage) {
  ready();
  auto r = post("/v1/completions", "{nope");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_NE(std::string(error_of(r).at("message").as_string()).find("invalid JSON"),
            std::string::npos);
  r = post("/v1/completions", R"({"prompt":"x","max_tokens":-3})");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(error_of(r).at("param"), "max_tokens");
  r = post("/v1/completions", R"({"prompt":"overload"})");
  EXPECT_EQ(r.result_int(), 429);
  r = post("/v1/completions", "{\"prompt\":\"" + std::string(300, 'a') + "\"}");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(error_of(r).at("code"), "context_length_exceeded");
  r = post("/v1/completions", "{\"prompt\":\"" + std::string(5000, 'a') + "\"}");
  EXPECT_EQ(r.result_int(), 413);
  EXPECT_EQ(get("/nothing").result_int(), 404);
  EXPECT_EQ(get("/v1/completions").result_int(), 405);
  EXPECT_EQ(get("/admin/api/stats").result_int(), 401);
  // Slow-loris: an unfinished header gets 408 after header_timeout_s.
  auto s = connect();
  net::write(s, net::buffer(std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\n")));
  http::response<http::string_body> res;
  http::read(s, buf_, res);
  EXPECT_EQ(res.result_int(), 408);
  EXPECT_EQ(get("/health").result_int(), 200);
}

TEST_F(ServerTest, ClientDisconnectMidStreamAbortsTheRequest) {
  ready();
  {
    auto s = connect();
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::content_type, "application/json");
    req.body() = R"({"prompt":"x","max_tokens":250,"stream":true})";
    req.prepare_payload();
    http::write(s, req);
    char tmp[256];
    s.read_some(net::buffer(tmp));  // the stream began
    EXPECT_EQ(engine_->live(), 1);
  }  // closed
  // A liveness bound, not a timing assertion: generous for loaded CI machines.
  for (int i = 0; i < 3000 && engine_->live() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine_->live(), 0);
  EXPECT_GE(engine_->aborts.load(), 1);  // abort is idempotent; the server may repeat it
}

TEST_F(ServerTest, AdminProfileValidatesAndPublishes) {
  ready();
  auto s = connect();
  auto r = request(s, http::verb::put, "/admin/api/profile", R"({"capacity":32})", "secret");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(json::parse(r.body()).at("version").as_int64(), 2);
  r = request(s, http::verb::put, "/admin/api/profile", R"({"window":100})", "secret");
  EXPECT_EQ(r.result_int(), 400);
  EXPECT_EQ(std::string(error_of(r).at("param").as_string()).substr(0, 8), "sparsity");
  r = request(s, http::verb::get, "/admin/api/profile", "", "secret");
  EXPECT_EQ(json::parse(r.body()).at("profile").at("capacity").as_int64(), 32);
  EXPECT_EQ(json::parse(r.body()).at("version").as_int64(), 2);
  r = request(s, http::verb::get, "/admin?token=secret");
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_NE(r.body().find("<svg class=\"chart tall\" id=\"heatmap\">"), std::string::npos);
  // The stats carry one `layers` entry per layer (before any census: the profile's rules).
  r = request(s, http::verb::get, "/admin/api/stats", "", "secret");
  const auto layers = json::parse(r.body()).at("layers").as_array();
  ASSERT_EQ(layers.size(), 4u);
  EXPECT_EQ(layers[0].at("policy").as_string(), "full");
  EXPECT_EQ(layers[1].at("policy").as_string(), "scored");
  EXPECT_EQ(layers[1].at("capacity").as_int64(), 32);
  r = request(s, http::verb::get, "/metrics");
  EXPECT_NE(r.body().find("strata_sparsity_profile_version{model_name=\"fake\"} 2"),
            std::string::npos);
}

// A backend that cannot run sparse layers (the CUDA backend with cache.kv_dtype fp8): a profile
// that enables sparsity is refused with the engine's reason and changes nothing; turning
// sparsity off is still accepted.
TEST_F(ServerTest, AdminProfileThatTheBackendCannotRunIsRefusedAndChangesNothing) {
  ready();
  engine_->refuse_sparse("no e4m3 sparse kernels");
  auto s = connect();
  auto r = request(s, http::verb::put, "/admin/api/profile", R"({"capacity":32})", "secret");
  ASSERT_EQ(r.result_int(), 400) << r.body();
  EXPECT_EQ(std::string(error_of(r).at("param").as_string()), "sparsity.enabled");
  EXPECT_NE(std::string(error_of(r).at("message").as_string()).find("no e4m3 sparse kernels"),
            std::string::npos)
      << r.body();
  r = request(s, http::verb::get, "/admin/api/profile", "", "secret");
  EXPECT_EQ(json::parse(r.body()).at("version").as_int64(), 1);
  EXPECT_NE(json::parse(r.body()).at("profile").at("capacity").as_int64(), 32);
  r = request(s, http::verb::put, "/admin/api/profile", R"({"enabled":false})", "secret");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_EQ(json::parse(r.body()).at("version").as_int64(), 2);
  EXPECT_FALSE(json::parse(r.body()).at("profile").at("enabled").as_bool());
}

TEST_F(ServerTest, AdminQualityReportsTheGuardrailPerVersion) {
  ready();
  auto s = connect();
  EXPECT_EQ(request(s, http::verb::get, "/admin/api/quality").result_int(), 401);
  auto r = request(s, http::verb::get, "/admin/api/quality", "", "secret");
  ASSERT_EQ(r.result_int(), 200) << r.body();
  EXPECT_FALSE(json::parse(r.body()).at("enabled").as_bool());  // no monitor
  auto q = std::make_shared<QualityReport>();
  q->sample_rate = 0.5;
  ReplayRecord rec;
  rec.profile_version = 1;
  rec.prompt.assign(10, 1);
  ReplayScore sc;
  sc.positions = 8, sc.agree = 6, sc.delta_sum = -0.8;
  add_replay(*q, rec, sc);
  engine_->quality = q;
  r = request(s, http::verb::get, "/admin/api/quality", "", "secret");
  const auto o = json::parse(r.body()).as_object();
  EXPECT_TRUE(o.at("enabled").as_bool());
  const auto& v = o.at("versions").as_array().at(0).as_object();
  EXPECT_EQ(v.at("profile_version").to_number<std::int64_t>(), 1);
  EXPECT_TRUE(v.at("published").as_bool());
  EXPECT_DOUBLE_EQ(v.at("argmax_agreement").as_double(), 0.75);
  r = request(s, http::verb::get, "/metrics");
  EXPECT_NE(r.body().find("strata_quality_argmax_agreement{model_name=\"fake\",profile_version="
                          "\"1\",prompt_len=\"0-255\"} 0.75\n"),
            std::string::npos)
      << r.body();
}

TEST_F(ServerTest, WebSocketEventsAndCancel) {
  ready();
  beast::websocket::stream<tcp::socket> ws(connect());
  ws.handshake("localhost", "/v1/ws");
  auto read = [&] {
    beast::flat_buffer b;
    ws.read(b);
    return json::parse(beast::buffers_to_string(b.data()));
  };
  ws.write(net::buffer(std::string("garbage")));
  auto e = read();
  EXPECT_EQ(e.at("type"), "error");
  ws.write(net::buffer(std::string(
      R"({"type":"response.create","response":{"prompt":"x","max_output_tokens":2}})")));
  EXPECT_EQ(read().at("type"), "response.created");
  std::string text;
  json::value done;
  for (;;) {
    auto ev = read();
    if (ev.at("type") == "response.output_text.delta") text += ev.at("delta").as_string();
    if (ev.at("type") == "response.done") {
      done = ev;
      break;
    }
  }
  EXPECT_EQ(text, "t0 t1 ");
  EXPECT_EQ(done.at("response").at("status"), "incomplete");
  EXPECT_EQ(done.at("response").at("usage").at("output_tokens").as_int64(), 2);
  // A long response, cancelled.
  ws.write(net::buffer(
      std::string(R"({"type":"response.create","response":{"prompt":"x","max_tokens":250}})")));
  const auto created = read();
  const std::string id(created.at("response").at("id").as_string());
  ws.write(net::buffer(R"({"type":"response.cancel","response_id":")" + id + "\"}"));
  for (;;) {
    auto ev = read();
    if (ev.at("type") == "response.done") {
      EXPECT_EQ(ev.at("response").at("status"), "cancelled");
      break;
    }
  }
  // A liveness bound, not a timing assertion: generous for loaded CI machines.
  for (int i = 0; i < 3000 && engine_->live() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine_->live(), 0);
  ws.close(beast::websocket::close_code::normal);
}

}  // namespace
}  // namespace strata::api
