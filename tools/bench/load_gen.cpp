#include "tools/bench/load_gen.h"

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <random>
#include <sstream>

#include "runtime/error.h"

namespace strata::bench {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string make_body(const LoadOptions& o, const std::string& model, std::mt19937_64& rng,
                      int output_tokens) {
  json::object b;
  b["model"] = model;
  if (o.text_prompts) {
    static const char* words[] = {"the",  "model", "serves",  "long", "prompts",
                                  "with", "less",  "memory",  "and",  "keeps",
                                  "only", "what",  "matters", "today"};
    std::string text;
    std::uniform_int_distribution<int> d(0, static_cast<int>(std::size(words)) - 1);
    for (int i = 0; i < o.input_tokens; ++i) text += (i ? " " : "") + std::string(words[d(rng)]);
    b["prompt"] = text;
  } else {
    json::array ids;
    std::uniform_int_distribution<int> d(1, std::max(2, o.id_range) - 1);
    for (int i = 0; i < o.input_tokens; ++i) ids.push_back(d(rng));
    b["prompt"] = ids;
  }
  b["max_tokens"] = output_tokens;
  b["min_tokens"] = output_tokens;
  b["ignore_eos"] = true;
  b["temperature"] = 0.0;
  b["stream"] = true;
  b["stream_options"] = json::object{{"include_usage", true}};
  return json::serialize(b);
}

class ConnectionPool {
 public:
  explicit ConnectionPool(bool keep) : keep_(keep) {}
  std::unique_ptr<beast::tcp_stream> take() {
    if (!keep_ || idle_.empty()) return nullptr;
    auto s = std::move(idle_.front());
    idle_.pop_front();
    return s;
  }
  void give(std::unique_ptr<beast::tcp_stream> s) {
    if (keep_) idle_.push_back(std::move(s));
  }

 private:
  bool keep_;
  std::deque<std::unique_ptr<beast::tcp_stream>> idle_;
};

awaitable<RequestRecord> one_request(const LoadOptions& o, std::string body, ConnectionPool& pool,
                                     Clock::time_point t0) {
  RequestRecord r;
  r.send_s = since(t0);
  const auto sent = Clock::now();
  auto ex = co_await asio::this_coro::executor;
  try {
    auto stream = pool.take();
    bool reused = stream != nullptr;
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!stream) {
        stream = std::make_unique<beast::tcp_stream>(ex);
        tcp::resolver res(ex);
        auto eps = co_await res.async_resolve(o.host, std::to_string(o.port), use_awaitable);
        stream->expires_after(std::chrono::seconds(30));
        co_await stream->async_connect(eps, use_awaitable);
      }
      http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
      req.set(http::field::host, o.host);
      req.set(http::field::content_type, "application/json");
      req.set(http::field::accept, "text/event-stream");
      if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
      req.keep_alive(o.keep_alive);
      req.body() = body;
      req.prepare_payload();
      stream->expires_after(std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000)));
      auto [wec, wn] = co_await http::async_write(*stream, req, asio::as_tuple(use_awaitable));
      if (wec && reused && attempt == 0) {  // a kept-alive connection the server closed
        stream.reset();
        continue;
      }
      if (wec) throw beast::system_error(wec);
      break;
    }
    beast::flat_buffer buf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    co_await http::async_read_header(*stream, buf, p, use_awaitable);
    if (p.get().result() != http::status::ok) {
      r.error = "HTTP " + std::to_string(p.get().result_int());
      co_return r;
    }
    std::string sse;
    char tmp[16384];
    bool done = false, first = true;
    Clock::time_point last{};
    int chunks = 0;
    while (!p.is_done()) {
      p.get().body().data = tmp;
      p.get().body().size = sizeof tmp;
      auto [ec, n] = co_await http::async_read(*stream, buf, p, asio::as_tuple(use_awaitable));
      if (ec == http::error::need_buffer) ec = {};
      if (ec == http::error::end_of_stream || ec == asio::error::eof) break;
      if (ec) throw beast::system_error(ec);
      sse.append(tmp, sizeof tmp - p.get().body().size);
      for (std::size_t pos; (pos = sse.find("\n\n")) != std::string::npos;) {
        std::string ev = sse.substr(0, pos);
        sse.erase(0, pos + 2);
        if (ev.rfind("data: ", 0) != 0) continue;
        const std::string data = ev.substr(6);
        if (data == "[DONE]") {
          done = true;
          continue;
        }
        const auto v = json::parse(data);
        const auto& obj = v.as_object();
        if (auto* e = obj.if_contains("error")) {
          r.error = json::serialize(*e);
          co_return r;
        }
        if (auto* u = obj.if_contains("usage"); u && u->is_object()) {
          r.output_tokens =
              static_cast<int>(u->as_object().at("completion_tokens").to_number<std::int64_t>());
          r.prompt_tokens =
              static_cast<int>(u->as_object().at("prompt_tokens").to_number<std::int64_t>());
        }
        if (auto* ch = obj.if_contains("choices");
            ch && ch->is_array() && !ch->as_array().empty()) {
          const auto& c0 = ch->as_array()[0].as_object();
          const auto* text = c0.if_contains("text");
          const bool content = text && text->is_string() && !text->as_string().empty();
          const bool finish = c0.if_contains("finish_reason") && !c0.at("finish_reason").is_null();
          if (content || (!finish && c0.if_contains("token_ids"))) {
            const auto now = Clock::now();
            ++chunks;
            if (first) {
              r.ttft_s = std::chrono::duration<double>(now - sent).count();
              first = false;
            } else {
              r.itl_s.push_back(std::chrono::duration<double>(now - last).count());
            }
            last = now;
          }
        }
      }
      if (done) break;
    }
    r.e2e_s = std::chrono::duration<double>(Clock::now() - sent).count();
    if (!done) {
      r.error = "stream ended without [DONE]";
      co_return r;
    }
    if (r.output_tokens == 0) r.output_tokens = chunks;  // server sent no usage
    if (first) r.ttft_s = r.e2e_s;
    r.ok = true;
    if (o.keep_alive && p.get().keep_alive()) pool.give(std::move(stream));
  } catch (const std::exception& e) {
    r.error = e.what();
    r.e2e_s = std::chrono::duration<double>(Clock::now() - sent).count();
  }
  co_return r;
}

std::string first_model(const LoadOptions& o) {
  if (!o.model.empty()) return o.model;
  auto [status, body] = http_get(o.host, o.port, "/v1/models");
  if (status == 200) {
    try {
      const auto v = json::parse(body);
      return std::string(v.at("data").as_array().at(0).at("id").as_string());
    } catch (const std::exception&) {
    }
  }
  return "default";
}

}  // namespace

std::vector<RequestRecord> run_load(const LoadOptions& o, double* duration_s,
                                    LoadExcluded* excluded) {
  if (o.steady_state && o.concurrency < 1)
    throw ConfigError("--steady-state", "needs a concurrency level >= 1");
  asio::io_context io;
  const std::string model = first_model(o);
  std::mt19937_64 rng(o.seed);
  std::vector<RequestRecord> records(static_cast<std::size_t>(o.num_prompts));
  ConnectionPool pool(o.keep_alive);
  int done = 0, failed = 0, launched = 0;
  Clock::time_point t0;
  LoadExcluded ex_counts;

  auto driver = [&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < o.warmup; ++i)
      co_await one_request(o, make_body(o, model, rng, o.output_tokens), pool, Clock::now());
    if (o.on_measure_start) o.on_measure_start();
    t0 = Clock::now();
    std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
    asio::steady_timer timer(ex);
    int in_flight = 0;
    asio::steady_timer slot(ex);  // woken when a request finishes
    if (o.steady_state) {         // the ramp-up round: staggered lengths, excluded
      for (int j = 0; j < o.concurrency; ++j) {
        const int out = std::max(
            1, static_cast<int>((static_cast<long>(o.output_tokens) * (j + 1)) / o.concurrency));
        ++in_flight;
        asio::co_spawn(
            ex,
            [&, body = make_body(o, model, rng, out)]() -> awaitable<void> {
              const auto r = co_await one_request(o, body, pool, t0);
              --in_flight;
              ++ex_counts.requests;
              if (!r.ok) ++ex_counts.failed;
              ex_counts.input_tokens += r.ok ? r.prompt_tokens : 0;
              ex_counts.output_tokens += r.ok ? r.output_tokens : 0;
              slot.cancel();
            },
            asio::detached);
      }
    }
    for (int i = 0; i < o.num_prompts; ++i) {
      if (o.max_duration_s > 0 && since(t0) > o.max_duration_s) break;
      if (o.request_rate > 0 && i > 0) {
        timer.expires_after(
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng))));
        co_await timer.async_wait(use_awaitable);
      }
      while (o.concurrency > 0 && in_flight >= o.concurrency) {
        slot.expires_at(Clock::time_point::max());
        co_await slot.async_wait(asio::as_tuple(use_awaitable));
      }
      ++in_flight;
      ++launched;
      asio::co_spawn(
          ex,
          [&, i, body = make_body(o, model, rng, o.output_tokens)]() -> awaitable<void> {
            records[static_cast<std::size_t>(i)] = co_await one_request(o, body, pool, t0);
            --in_flight;
            ++done;
            if (!records[static_cast<std::size_t>(i)].ok) ++failed;
            if (o.progress) o.progress(done, failed, o.num_prompts, since(t0));
            slot.cancel();
          },
          asio::detached);
    }
    while (in_flight > 0) {
      slot.expires_at(Clock::time_point::max());
      co_await slot.async_wait(asio::as_tuple(use_awaitable));
    }
  };
  asio::co_spawn(io, driver(), [](std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
  });
  io.run();
  records.resize(static_cast<std::size_t>(launched));
  if (duration_s) {
    *duration_s = since(t0);
    if (o.steady_state && !records.empty()) {  // first measured send -> last measured finish
      double first = records.front().send_s, last = 0;
      for (const auto& r : records) {
        first = std::min(first, r.send_s);
        last = std::max(last, r.send_s + r.e2e_s);
      }
      *duration_s = last - first;
    }
  }
  if (excluded) *excluded = ex_counts;
  return records;
}

std::pair<int, std::string> http_get(const std::string& host, int port, const std::string& path,
                                     double timeout_s) {
  try {
    asio::io_context io;
    tcp::resolver res(io);
    beast::tcp_stream s(io);
    s.expires_after(std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)));
    s.connect(res.resolve(host, std::to_string(port)));
    http::request<http::empty_body> req{http::verb::get, path, 11};
    req.set(http::field::host, host);
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> resp;
    http::read(s, buf, resp);
    return {resp.result_int(), resp.body()};
  } catch (const std::exception&) {
    return {0, ""};
  }
}

std::map<std::string, double> parse_prometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) continue;
    const std::string name = line.substr(0, name_end);
    std::size_t vpos = line[name_end] == '{' ? line.find('}', name_end) : name_end;
    if (vpos == std::string::npos) continue;
    vpos = line.find_first_not_of(' ', vpos + (line[name_end] == '{' ? 1 : 0));
    if (vpos == std::string::npos) continue;
    try {
      out[name] += std::stod(line.substr(vpos));
    } catch (const std::exception&) {
    }
  }
  return out;
}

}  // namespace strata::bench
