// The HTTP/WebSocket server against an Engine test double (a deterministic token generator
// on its own thread): SSE and JSON shapes over a real socket, keep-alive, limits, errors,
// abort on disconnect, WebSocket events, graceful stop. The real engine is exercised by the
// script tests (tests/scripts/api_node.cmake).
#include "api/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/concurrent_channel.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <filesystem>
#include <thread>

#include "actors/engine.h"
#include "runtime/error.h"
#include "runtime/make_model.h"
#include "runtime/tokenizer.h"

namespace strata::api {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = net::ip::tcp;

class FakeEngine;

class FakeStream : public TokenStream {
 public:
  FakeStream(net::any_io_executor ex, std::string id, int prompt) : ch(ex, 64) {
    id_ = std::move(id);
    prompt_tokens_ = prompt;
  }
  net::awaitable<std::optional<StreamEvent>> next() override {
    auto [ec, ev] = co_await ch.async_receive(net::as_tuple(net::use_awaitable));
    if (ec) co_return std::nullopt;
    co_return ev;
  }
  std::optional<StreamEvent> next_blocking() override { return std::nullopt; }
  net::experimental::concurrent_channel<void(boost::system::error_code, StreamEvent)> ch;
  std::atomic<bool> aborted{false};
};

class FakeEngine : public Engine {
 public:
  explicit FakeEngine(const std::string& dir) {
    write_builtin_tokenizer(dir);
    tok_ = Tokenizer::load(dir + "/tokenizer.json", "");
    model_.vocab_size = tok_->vocab_size();
    model_.max_position_embeddings = 256;
    model_.num_hidden_layers = 4;
    config_.model.path = dir;
    config_.sparsity.enabled = true;
    config_.sparsity.full_layers = 1;
    config_.sparsity.capacity = 64;
    config_.sparsity.window = 8;
    profile_ = config_.sparsity;
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeEngine() override {
    work_.reset();
    io_.stop();
    thread_.join();
  }
  std::shared_ptr<TokenStream> submit(Request r) override {
    if (r.prompt_text && r.prompt_text->find("overload") != std::string::npos)
      throw Overloaded("waiting queue is full");
    if (r.prompt_text && r.prompt_text->size() > 200)
      throw InvalidRequest("prompt", "prompt of " + std::to_string(r.prompt_text->size()) +
                                         " tokens is over the context of 256");
    const int prompt = r.prompt_ids ? static_cast<int>(r.prompt_ids->size()) : 3;
    auto s = std::make_shared<FakeStream>(io_.get_executor(), r.id, prompt);
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_[r.id] = s;
    }
    ++submitted;
    net::co_spawn(io_, produce(s, r), net::detached);
    return s;
  }
  void abort(const std::string& id) override {
    std::shared_ptr<FakeStream> s;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = live_.find(id);
      if (it == live_.end()) return;
      s = it->second;
    }
    ++aborts;
    s->aborted = true;
  }
  EngineStats stats() const override {
    EngineStats st;
    std::lock_guard<std::mutex> lock(mu_);
    st.running = static_cast<int>(live_.size());
    st.pages_used = st.running;
    st.pages_total = 100;
    st.pages_per_layer = {st.running, 0, 0, 0};
    st.profile = profile_;
    st.profile_version = version_;
    return st;
  }
  std::uint64_t update_sparsity(const SparsityProfile& p) override {
    p.resolve(model_.num_hidden_layers);
    std::lock_guard<std::mutex> lock(mu_);
    profile_ = p;
    return ++version_;
  }
  const Tokenizer& tokenizer() const override { return *tok_; }
  const ModelConfig& model() const override { return model_; }
  const Config& config() const override { return config_; }
  void shutdown(std::chrono::milliseconds) override { shut = true; }

  int live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(live_.size());
  }
  std::atomic<int> submitted{0}, aborts{0};
  std::atomic<bool> shut{false};

 private:
  net::awaitable<void> produce(std::shared_ptr<FakeStream> s, Request r) {
    net::steady_timer t(io_);
    const int n = r.n;
    for (int k = 0; k < r.params.max_tokens && !s->aborted; ++k) {
      for (int c = 0; c < n && !s->aborted; ++c) {
        StreamEvent ev;
        ev.index = c;
        ev.text = "t" + std::to_string(k) + " ";
        ev.token_ids = {k % 50};
        if (r.params.logprobs >= 0) ev.logprobs = {{k % 50, -0.5f, {{1, -0.25f}}}};
        if (k + 1 == r.params.max_tokens) {
          ev.finish = FinishReason::kLength;
          if (c + 1 == n)
            ev.usage = Usage{s->prompt_tokens(), n * r.params.max_tokens, 0.1, 1, 2, 0.5, 2.0};
        }
        // Never block on a full channel: a server that stopped reading (client gone) must
        // still see the producer end once it aborts, as the real engine ends the stream.
        while (!s->ch.try_send(boost::system::error_code{}, ev) && !s->aborted) {
          t.expires_after(std::chrono::milliseconds(1));
          co_await t.async_wait(net::as_tuple(net::use_awaitable));
        }
      }
      t.expires_after(std::chrono::milliseconds(2));
      co_await t.async_wait(net::as_tuple(net::use_awaitable));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      live_.erase(s->id());  // before the stream ends, as the engine frees pages before
    }
    // End with an eof message behind the buffered events: asio 1.81's close() drops what is
    // still buffered (the real stream never closes its channel either, actors/token_stream.h).
    while (!s->ch.try_send(net::error::eof, StreamEvent{})) {
      if (s->aborted) {
        s->ch.close();  // the reader is gone; nothing buffered matters
        co_return;
      }
      t.expires_after(std::chrono::milliseconds(1));
      co_await t.async_wait(net::as_tuple(net::use_awaitable));
    }
  }

  net::io_context io_;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work_{io_.get_executor()};
  std::thread thread_;
  std::unique_ptr<Tokenizer> tok_;
  ModelConfig model_;
  Config config_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<FakeStream>> live_;
  SparsityProfile profile_;
  std::uint64_t version_ = 1;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strata_api_server_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    engine_ = std::make_shared<FakeEngine>(dir_.string());
    ServerOptions o;
    o.server.port = 0;
    o.server.max_body_bytes = 4096;
    o.server.header_timeout_s = 0.5;
    o.server.admin_token = "secret";
    o.model_name = "fake";
    o.handle_signals = false;
    server_ = std::make_unique<Server>(o);
    server_->listen();
    thread_ = std::thread([this] { server_->run(); });
  }
  void TearDown() override {
    server_->stop();
    thread_.join();
    server_.reset();
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }
  void ready() {
    server_->set_engine(engine_);
    for (int i = 0; i < 200 && get("/health").result_int() != 200; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  tcp::socket connect() {
    tcp::socket s(io_);
    s.connect({net::ip::make_address("127.0.0.1"), server_->port()});
    return s;
  }
  http::response<http::string_body> request(tcp::socket& s, http::verb v, const std::string& target,
                                            const std::string& body = {},
                                            const std::string& auth = {}) {
    http::request<http::string_body> req{v, target, 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::content_type, "application/json");
    if (!auth.empty()) req.set(http::field::authorization, "Bearer " + auth);
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    http::response<http::string_body> res;
    http::read(s, buf_, res);
    return res;
  }
  http::response<http::string_body> get(const std::string& target) {
    auto s = connect();
    return request(s, http::verb::get, target);
  }
  http::response<http::string_body> post(const std::string& target, const std::string& body) {
    auto s = connect();
    return request(s, http::verb::post, target, body);
  }
  static json::value error_of(const http::response<http::string_body>& r) {
    return json::parse(r.body()).at("error");
  }

  std::filesystem::path dir_;
  std::shared_ptr<FakeEngine> engine_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
  net::io_context io_;
  beast::flat_buffer buf_;
};

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
    req.set(http::field::host, "x");
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
  EXPECT_NE(r.body().find("<canvas"), std::string::npos);
  r = request(s, http::verb::get, "/metrics");
  EXPECT_NE(r.body().find("strata_sparsity_profile_version{model_name=\"fake\"} 2"),
            std::string::npos);
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
