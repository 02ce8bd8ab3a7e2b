// Test doubles for the HTTP/WebSocket server tests: FakeEngine (a deterministic token
// generator on its own thread, as the real engine streams) and the ServerTest fixture (a
// server on a free port, HTTP helpers over real sockets). options() may be overridden to
// serve with other limits.
#pragma once

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
#include "api/server.h"
#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/text/tokenizer.h"

// note: GCC 12 with -fsanitize=address warns that FakeEngine::produce's coroutine frame is
// freed by a mismatched operator delete (asio's awaitable_frame_base has both): a false
// positive that -Werror turns into an ASan build failure of every server test.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace strata::api::test {

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
    st.quality = quality;
    return st;
  }
  std::shared_ptr<const QualityReport> quality;  // the guardrail's report stats() carries
  std::uint64_t update_sparsity(const SparsityProfile& p) override {
    p.resolve(model_.num_hidden_layers);
    std::lock_guard<std::mutex> lock(mu_);
    if (p.enabled && !sparse_refusal_.empty())  // as the engine refuses (BackendInfo)
      throw ConfigError("sparsity.enabled",
                        "this server cannot run sparse layers: " + sparse_refusal_);
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
  // Makes update_sparsity refuse profiles that enable sparsity, as the engine does over a
  // backend that cannot run sparse layers (BackendInfo::sparse_refusal).
  void refuse_sparse(std::string why) {
    std::lock_guard<std::mutex> lock(mu_);
    sparse_refusal_ = std::move(why);
  }

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
  std::string sparse_refusal_;
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
    server_ = std::make_unique<Server>(options());
    server_->listen();
    thread_ = std::thread([this] { server_->run(); });
  }
  virtual ServerOptions options() const {
    ServerOptions o;
    o.server.port = 0;
    o.server.max_body_bytes = 4096;
    o.server.header_timeout_s = 0.5;
    o.server.admin_token = "secret";
    o.model_name = "fake";
    o.handle_signals = false;
    return o;
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

}  // namespace strata::api::test

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
