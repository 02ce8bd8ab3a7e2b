// A stand-in OpenAI-compatible server for the serving benchmark's tests: one thread, Beast over
// loopback, token events at known times. POST /v1/completions answers 200 with a chunked SSE
// stream: the header at once, the first token event `first_token_ms` after the request was read,
// then one every `token_interval_ms` (deadlines counted from the request, so a late wake-up does
// not shift the later ones), max_tokens of them, then a finish chunk, a usage chunk and
// `data: [DONE]`. GET /v1/models lists `model`; GET /metrics is empty; with `api_key` set every
// route but /metrics answers 401 unless "Authorization: Bearer <api_key>".
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

namespace strata::bench::testing {

struct StubOptions {
  std::string api_key;  // "" = no authentication
  std::string model = "stub-model";
  int first_token_ms = 50;
  int token_interval_ms = 10;
};

class SseStubServer {
 public:
  explicit SseStubServer(StubOptions o)
      : o_(std::move(o)), acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    boost::asio::co_spawn(io_, accept_loop(), boost::asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~SseStubServer() {
    io_.stop();
    thread_.join();
  }
  SseStubServer(const SseStubServer&) = delete;
  SseStubServer& operator=(const SseStubServer&) = delete;

  int port() const { return acceptor_.local_endpoint().port(); }
  int completions() const { return completions_; }  // streams served to the end
  // completions() once it reaches `n` or `timeout` passes: the client may finish a stream at its
  // `data: [DONE]` event before the stub has written the last chunk and counted it.
  int wait_completions(int n, std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (completions_ < n && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return completions_;
  }
  // The token-id prompts of every completion request, in arrival order.
  std::vector<std::vector<std::int64_t>> prompts() const {
    std::lock_guard<std::mutex> l(mu_);
    return prompts_;
  }

 private:
  using tcp = boost::asio::ip::tcp;
  using Clock = std::chrono::steady_clock;

  boost::asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, sock] =
          co_await acceptor_.async_accept(boost::asio::as_tuple(boost::asio::use_awaitable));
      if (ec) co_return;
      boost::asio::co_spawn(io_, session(std::move(sock)), boost::asio::detached);
    }
  }

  boost::asio::awaitable<void> session(tcp::socket sock) {
    namespace http = boost::beast::http;
    namespace json = boost::json;
    using boost::asio::as_tuple;
    using boost::asio::use_awaitable;
    sock.set_option(tcp::no_delay(true));
    boost::beast::flat_buffer buf;
    for (;;) {
      http::request<http::string_body> req;
      auto [rec, rn] = co_await http::async_read(sock, buf, req, as_tuple(use_awaitable));
      if (rec) co_return;
      const auto arrived = Clock::now();
      auto reply = [&](http::status st, std::string body) {
        auto res = std::make_shared<http::response<http::string_body>>(st, 11);
        res->set(http::field::content_type, "application/json");
        res->keep_alive(req.keep_alive());
        res->body() = std::move(body);
        res->prepare_payload();
        return res;
      };
      std::shared_ptr<http::response<http::string_body>> res;
      const bool authorized =
          o_.api_key.empty() || req[http::field::authorization] == "Bearer " + o_.api_key;
      int max_tokens = 0;
      if (req.target() == "/metrics") {
        res = reply(http::status::ok, "");
      } else if (!authorized) {
        res = reply(http::status::unauthorized,
                    R"({"error":{"message":"stub: a valid API key is required",)"
                    R"("type":"authentication_error","param":null,"code":"invalid_api_key"}})");
      } else if (req.target() == "/v1/models") {
        res =
            reply(http::status::ok,
                  json::serialize(json::object{
                      {"object", "list"},
                      {"data", json::array{json::object{{"id", o_.model}, {"object", "model"}}}}}));
      } else if (req.target() == "/v1/completions" && req.method() == http::verb::post) {
        const auto body = json::parse(req.body()).as_object();
        if (body.at("model").as_string() != o_.model)
          res = reply(http::status::not_found,
                      R"({"error":{"message":"stub: no such model","type":"not_found_error"}})");
        else {
          max_tokens = static_cast<int>(body.at("max_tokens").to_number<std::int64_t>());
          if (const auto* p = body.if_contains("prompt"); p && p->is_array()) {
            std::vector<std::int64_t> ids;
            for (const auto& t : p->as_array())
              if (t.is_number()) ids.push_back(t.to_number<std::int64_t>());
            std::lock_guard<std::mutex> l(mu_);
            prompts_.push_back(std::move(ids));
          }
        }
      } else {
        res = reply(http::status::not_found, R"({"error":{"message":"stub: no route"}})");
      }
      if (res) {
        auto [wec, wn] = co_await http::async_write(sock, *res, as_tuple(use_awaitable));
        if (wec || !res->keep_alive()) co_return;
        continue;
      }
      if (!co_await stream(sock, arrived, max_tokens, req.keep_alive())) co_return;
      ++completions_;
      if (!req.keep_alive()) co_return;
    }
  }

  // The SSE response; false when the connection is gone.
  boost::asio::awaitable<bool> stream(tcp::socket& sock, Clock::time_point arrived, int tokens,
                                      bool keep_alive) {
    namespace http = boost::beast::http;
    using boost::asio::as_tuple;
    using boost::asio::use_awaitable;
    http::response<http::empty_body> head{http::status::ok, 11};
    head.set(http::field::content_type, "text/event-stream");
    head.chunked(true);
    head.keep_alive(keep_alive);
    http::response_serializer<http::empty_body> sr{head};
    if (auto [ec, n] = co_await http::async_write_header(sock, sr, as_tuple(use_awaitable)); ec)
      co_return false;
    auto send = [&](std::string event) -> boost::asio::awaitable<bool> {
      auto [ec, n] = co_await boost::asio::async_write(
          sock, http::make_chunk(boost::asio::buffer(event)), as_tuple(use_awaitable));
      co_return !ec;
    };
    boost::asio::steady_timer timer(sock.get_executor());
    for (int i = 0; i < tokens; ++i) {
      timer.expires_at(arrived +
                       std::chrono::milliseconds(o_.first_token_ms + i * o_.token_interval_ms));
      co_await timer.async_wait(as_tuple(use_awaitable));
      if (!co_await send(R"(data: {"id":"cmpl-stub","object":"text_completion","choices":[)"
                         R"({"index":0,"text":" tok","logprobs":null,"finish_reason":null}]})"
                         "\n\n"))
        co_return false;
    }
    const std::string usage = R"({"prompt_tokens":4,"completion_tokens":)" +
                              std::to_string(tokens) + R"(,"total_tokens":)" +
                              std::to_string(tokens + 4) + "}";
    if (!co_await send(R"(data: {"id":"cmpl-stub","choices":[{"index":0,"text":"",)"
                       R"("logprobs":null,"finish_reason":"length"}]})"
                       "\n\n"
                       R"(data: {"id":"cmpl-stub","choices":[],"usage":)" +
                       usage + "}\n\ndata: [DONE]\n\n"))
      co_return false;
    auto [ec, n] =
        co_await boost::asio::async_write(sock, http::make_chunk_last(), as_tuple(use_awaitable));
    co_return !ec;
  }

  StubOptions o_;
  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  std::thread thread_;
  std::atomic<int> completions_{0};
  mutable std::mutex mu_;
  std::vector<std::vector<std::int64_t>> prompts_;
};

}  // namespace strata::bench::testing
