#include "tools/bench/load_gen.h"

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <tuple>

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

std::vector<std::int64_t> random_ids(const LoadOptions& o, std::mt19937_64& rng, int n) {
  std::uniform_int_distribution<int> d(1, std::max(2, o.id_range) - 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(std::max(0, n)));
  for (auto& t : ids) t = d(rng);
  return ids;
}

std::string finish_body(json::object b, int output_tokens) {
  b["max_tokens"] = output_tokens;
  b["min_tokens"] = output_tokens;
  b["ignore_eos"] = true;
  b["temperature"] = 0.0;
  b["stream"] = true;
  b["stream_options"] = json::object{{"include_usage", true}};
  return json::serialize(b);
}

std::string ids_body(const std::string& model, const std::vector<std::int64_t>& ids,
                     int output_tokens) {
  json::object b;
  b["model"] = model;
  b["prompt"] = json::array(ids.begin(), ids.end());
  return finish_body(std::move(b), output_tokens);
}

std::string make_body(const LoadOptions& o, const std::string& model, std::mt19937_64& rng,
                      int output_tokens, const std::vector<std::int64_t>* prefix = nullptr) {
  if (prefix && !o.text_prompts) {  // kSharedPrefix
    auto ids = *prefix;
    const auto own = random_ids(o, rng, o.input_tokens);
    ids.insert(ids.end(), own.begin(), own.end());
    return ids_body(model, ids, output_tokens);
  }
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
  return finish_body(std::move(b), output_tokens);
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

// The message of an error body: the OpenAI error object's message, a FastAPI-style "detail", or
// the start of the body as text.
std::string error_message(const std::string& body) {
  std::string msg;
  try {
    const auto v = json::parse(body);
    if (const auto* obj = v.if_object()) {
      if (const auto* e = obj->if_contains("error")) {
        if (e->is_string()) msg = e->as_string();
        if (const auto* eo = e->if_object())
          if (const auto* m = eo->if_contains("message"); m && m->is_string()) msg = m->as_string();
        if (msg.empty()) msg = json::serialize(*e);
      }
      if (const auto* d = obj->if_contains("detail"); msg.empty() && d)
        msg = d->is_string() ? std::string(d->as_string()) : json::serialize(*d);
    }
  } catch (const std::exception&) {
  }
  if (msg.empty()) msg = body.substr(0, 200);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == '\r')) msg.pop_back();
  return msg;
}

std::string http_error(int status, const std::string& body) {
  const auto msg = error_message(body);
  return "HTTP " + std::to_string(status) + (msg.empty() ? "" : ": " + msg);
}

// Takes complete SSE events off the front of `buf` (carriage returns already dropped) and returns
// the data of the next one that has any (its `data:` lines joined by '\n'); nullopt when no
// complete event is left. Comments, `event:` and `id:` lines are skipped.
std::optional<std::string> next_sse_data(std::string& buf) {
  for (;;) {
    const auto end = buf.find("\n\n");
    if (end == std::string::npos) return std::nullopt;
    const std::string ev = buf.substr(0, end);
    buf.erase(0, end + 2);
    std::string data;
    bool any = false;
    for (std::size_t pos = 0; pos <= ev.size();) {
      std::size_t nl = ev.find('\n', pos);
      if (nl == std::string::npos) nl = ev.size();
      std::string_view line(ev.data() + pos, nl - pos);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        if (any) data += '\n';
        data += line;
        any = true;
      }
      pos = nl + 1;
    }
    if (any) return data;
  }
}

// A token-bearing chunk: the first choice carries text (completions), delta content (chat), or
// token ids without being the finish chunk.
bool carries_token(const json::object& obj) {
  const auto* ch = obj.if_contains("choices");
  if (!ch || !ch->is_array() || ch->as_array().empty() || !ch->as_array()[0].is_object())
    return false;
  const auto& c0 = ch->as_array()[0].as_object();
  auto nonempty = [](const json::value* v) {
    return v && v->is_string() && !v->as_string().empty();
  };
  if (nonempty(c0.if_contains("text"))) return true;
  if (const auto* d = c0.if_contains("delta"); d && d->is_object())
    if (nonempty(d->as_object().if_contains("content"))) return true;
  const bool finish = c0.if_contains("finish_reason") && !c0.at("finish_reason").is_null();
  return !finish && c0.if_contains("token_ids");
}

RequestRecord failed(RequestRecord r, Clock::time_point sent, std::string why) {
  r.ok = false;
  r.error = std::move(why);
  r.e2e_s = std::chrono::duration<double>(Clock::now() - sent).count();
  return r;
}

awaitable<RequestRecord> one_request(const LoadOptions& o, std::string body, ConnectionPool& pool,
                                     Clock::time_point t0) {
  RequestRecord r;
  r.send_s = since(t0);
  const auto sent = Clock::now();
  auto ex = co_await asio::this_coro::executor;
  const std::string where = o.host + ":" + std::to_string(o.port);
  const auto timeout = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000));

  http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
  req.set(http::field::host, o.host);
  req.set(http::field::content_type, "application/json");
  req.set(http::field::accept, "text/event-stream");
  if (!o.api_key.empty()) req.set(http::field::authorization, "Bearer " + o.api_key);
  req.keep_alive(o.keep_alive);
  req.body() = std::move(body);
  req.prepare_payload();

  auto stream = pool.take();
  bool reused = stream != nullptr;
  beast::flat_buffer buf;
  std::optional<http::response_parser<http::buffer_body>> p;
  for (;;) {
    if (!stream) {
      stream = std::make_unique<beast::tcp_stream>(ex);
      tcp::resolver res(ex);
      auto [rec, eps] =
          co_await res.async_resolve(o.host, std::to_string(o.port), asio::as_tuple(use_awaitable));
      if (rec) co_return failed(r, sent, "resolve " + where + ": " + rec.message());
      stream->expires_after(std::min<Clock::duration>(timeout, std::chrono::seconds(30)));
      auto [cec, ep] = co_await stream->async_connect(eps, asio::as_tuple(use_awaitable));
      if (cec) co_return failed(r, sent, "connect " + where + ": " + cec.message());
      beast::error_code ignored;
      stream->socket().set_option(tcp::no_delay(true), ignored);
    }
    stream->expires_after(timeout);
    auto [wec, wn] = co_await http::async_write(*stream, req, asio::as_tuple(use_awaitable));
    beast::error_code hec = wec;
    if (!wec) {
      buf.clear();
      p.emplace();
      p->body_limit(boost::none);
      std::tie(hec, std::ignore) =
          co_await http::async_read_header(*stream, buf, *p, asio::as_tuple(use_awaitable));
    }
    if (!hec) break;
    if (reused) {  // a kept-alive connection the server had closed: once more on a new one
      stream.reset();
      reused = false;
      continue;
    }
    co_return failed(
        r, sent,
        std::string(wec ? "send to " : "read response from ") + where + ": " + hec.message());
  }

  char tmp[16384];
  const int status = p->get().result_int();
  if (status != 200) {
    std::string err_body;
    while (!p->is_done() && err_body.size() < 65536) {
      p->get().body().data = tmp;
      p->get().body().size = sizeof tmp;
      auto [ec, n] =
          co_await http::async_read_some(*stream, buf, *p, asio::as_tuple(use_awaitable));
      err_body.append(tmp, sizeof tmp - p->get().body().size);
      if (ec && ec != http::error::need_buffer) break;
    }
    co_return failed(r, sent, http_error(status, err_body));
  }

  // One socket read per iteration: the events it completes are stamped with its return time.
  std::string sse;
  bool done = false, first = true;
  Clock::time_point last{};
  int events = 0;
  while (!done && !p->is_done()) {
    p->get().body().data = tmp;
    p->get().body().size = sizeof tmp;
    auto [ec, n] = co_await http::async_read_some(*stream, buf, *p, asio::as_tuple(use_awaitable));
    const auto now = Clock::now();
    const std::size_t got = sizeof tmp - p->get().body().size;
    for (std::size_t i = 0; i < got; ++i)
      if (tmp[i] != '\r') sse += tmp[i];
    while (!done) {
      auto data = next_sse_data(sse);
      if (!data) break;
      if (*data == "[DONE]") {
        done = true;
        r.e2e_s = std::chrono::duration<double>(now - sent).count();
        break;
      }
      json::value v;
      try {
        v = json::parse(*data);
      } catch (const std::exception&) {
        co_return failed(r, sent, "stream: an event is not JSON: " + data->substr(0, 120));
      }
      if (!v.is_object()) continue;
      const auto& obj = v.as_object();
      if (obj.contains("error")) co_return failed(r, sent, "stream error: " + error_message(*data));
      if (const auto* u = obj.if_contains("usage"); u && u->is_object()) {
        const auto& uo = u->as_object();
        if (const auto* c = uo.if_contains("completion_tokens"); c && c->is_number())
          r.output_tokens = static_cast<int>(c->to_number<std::int64_t>());
        if (const auto* c = uo.if_contains("prompt_tokens"); c && c->is_number())
          r.prompt_tokens = static_cast<int>(c->to_number<std::int64_t>());
        if (const auto* d = uo.if_contains("prompt_tokens_details"); d && d->is_object())
          if (const auto* c = d->as_object().if_contains("cached_tokens"); c && c->is_number())
            r.cached_tokens = static_cast<int>(c->to_number<std::int64_t>());
      }
      if (carries_token(obj)) {
        ++events;
        if (first)
          r.ttft_s = std::chrono::duration<double>(now - sent).count();
        else
          r.itl_s.push_back(std::chrono::duration<double>(now - last).count());
        first = false;
        last = now;
      }
    }
    if (done) break;
    if (ec == http::error::need_buffer) continue;
    if (ec)
      co_return failed(r, sent, "stream from " + where + " ended without [DONE]: " + ec.message());
  }
  if (!done) co_return failed(r, sent, "stream from " + where + " ended without [DONE]");
  if (first) co_return failed(r, sent, "stream from " + where + " carried no token");
  if (r.output_tokens == 0) r.output_tokens = events;  // the server sent no usage
  r.ok = true;
  if (o.keep_alive && p->get().keep_alive()) {  // read the rest (the last chunk) before reuse
    beast::error_code ec;
    while (!ec && !p->is_done()) {
      p->get().body().data = tmp;
      p->get().body().size = sizeof tmp;
      std::tie(ec, std::ignore) =
          co_await http::async_read_some(*stream, buf, *p, asio::as_tuple(use_awaitable));
      if (ec == http::error::need_buffer) ec = {};
    }
    if (!ec) pool.give(std::move(stream));
  }
  co_return r;
}

}  // namespace

std::string discover_model(const LoadOptions& o) {
  if (!o.model.empty()) return o.model;
  const std::string url = "http://" + o.host + ":" + std::to_string(o.port) + "/v1/models";
  std::string err;
  const auto [status, body] = http_get(o.host, o.port, "/v1/models", 30, o.api_key, &err);
  if (status == 0)
    throw std::runtime_error("model discovery: GET " + url + ": " + err +
                             " (is the server running there? --host/--port name it)");
  if (status != 200)
    throw std::runtime_error(
        "model discovery: GET " + url + ": " + http_error(status, body) +
        (status == 401 || status == 403 ? " (give the server's key with --api-key)" : "") +
        "; --model NAME skips the discovery");
  try {
    return std::string(json::parse(body).at("data").as_array().at(0).at("id").as_string());
  } catch (const std::exception&) {
    throw std::runtime_error("model discovery: GET " + url +
                             " answered 200 without a model (no data[0].id): " +
                             body.substr(0, 200) + "; --model NAME skips the discovery");
  }
}

namespace {

// kMultiTurn: conversations run side by side (at most o.concurrency at once), their turns one
// after another.
std::vector<RequestRecord> run_conversations(const LoadOptions& o, const std::string& model,
                                             double* duration_s) {
  const int turns = std::max(1, o.turns);
  const int convs = std::max(1, (o.num_prompts + turns - 1) / turns);
  std::vector<RequestRecord> records(static_cast<std::size_t>(convs) * turns);
  asio::io_context io;
  ConnectionPool pool(o.keep_alive);
  std::mt19937_64 rng(o.seed);
  int done = 0, failed = 0;
  const auto t0 = Clock::now();
  auto conversation = [&](int c) -> awaitable<void> {
    std::mt19937_64 crng(rng() ^ static_cast<std::uint64_t>(c));
    std::vector<std::int64_t> prompt = random_ids(o, crng, o.input_tokens);
    for (int t = 0; t < turns; ++t) {
      if (t > 0) {
        for (const auto* part : {&o.output_tokens, &o.turn_tokens}) {
          const auto more = random_ids(o, crng, *part);
          prompt.insert(prompt.end(), more.begin(), more.end());
        }
      }
      auto& r = records[static_cast<std::size_t>(c) * turns + t];
      r = co_await one_request(o, ids_body(model, prompt, o.output_tokens), pool, t0);
      r.turn = t;
      ++done;
      failed += !r.ok;
      if (o.progress) o.progress(done, failed, static_cast<int>(records.size()), since(t0));
      if (!r.ok) co_return;  // the conversation ends with its first failure
    }
  };
  auto driver = [&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer slot(ex);
    int in_flight = 0;
    const int limit = o.concurrency > 0 ? o.concurrency : convs;
    for (int c = 0; c < convs; ++c) {
      while (in_flight >= limit) {
        slot.expires_at(Clock::time_point::max());
        co_await slot.async_wait(asio::as_tuple(use_awaitable));
      }
      ++in_flight;
      asio::co_spawn(
          ex,
          [&, c]() -> awaitable<void> {
            co_await conversation(c);
            --in_flight;
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
  // A failed turn ends its conversation: the turns never sent are left out.
  std::vector<RequestRecord> out;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    if (r.ok || !r.error.empty()) out.push_back(r);
  }
  if (duration_s) *duration_s = since(t0);
  return out;
}

}  // namespace

std::vector<RequestRecord> run_load(const LoadOptions& o, double* duration_s,
                                    LoadExcluded* excluded) {
  if (o.steady_state && o.concurrency < 1)
    throw ConfigError("--steady-state", "needs a concurrency level >= 1");
  if (o.workload == LoadOptions::Workload::kMultiTurn && (o.steady_state || o.request_rate > 0))
    throw ConfigError("--workload",
                      "multi-turn sends each turn when the last ends: no "
                      "--steady-state or --request-rate");
  if (o.workload != LoadOptions::Workload::kRandom && o.text_prompts)
    throw ConfigError("--workload", "shared-prefix and multi-turn send token ids, not --text");
  asio::io_context io;
  const std::string model = discover_model(o);
  std::mt19937_64 rng(o.seed);
  if (!o.prompts.empty()) {  // explicit prompts: in order, one at a time
    std::vector<RequestRecord> records;
    ConnectionPool pool(o.keep_alive);
    const auto t0 = Clock::now();
    asio::co_spawn(
        io,
        [&]() -> awaitable<void> {
          for (const auto& ids : o.prompts)
            records.push_back(
                co_await one_request(o, ids_body(model, ids, o.output_tokens), pool, t0));
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    io.run();
    if (duration_s) *duration_s = since(t0);
    return records;
  }
  if (o.workload == LoadOptions::Workload::kMultiTurn) {
    if (o.warmup > 0) {  // single turns of other prompts (they share nothing), not measured
      LoadOptions w = o;
      w.num_prompts = o.warmup;
      w.turns = 1;
      w.concurrency = 1;
      w.seed = ~o.seed;
      w.progress = nullptr;
      (void)run_conversations(w, model, nullptr);
    }
    if (o.on_measure_start) o.on_measure_start();
    return run_conversations(o, model, duration_s);
  }
  // kSharedPrefix: the prefix every request of the run starts with.
  std::vector<std::int64_t> shared;
  if (o.workload == LoadOptions::Workload::kSharedPrefix) {
    std::mt19937_64 prng(o.seed ^ 0x5EEDull);
    shared = random_ids(o, prng, o.shared_prefix);
  }
  const std::vector<std::int64_t>* prefix =
      o.workload == LoadOptions::Workload::kSharedPrefix ? &shared : nullptr;
  std::vector<RequestRecord> records(static_cast<std::size_t>(o.num_prompts));
  ConnectionPool pool(o.keep_alive);
  int done = 0, failed = 0, launched = 0;
  Clock::time_point t0;
  LoadExcluded ex_counts;

  auto driver = [&]() -> awaitable<void> {
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < o.warmup; ++i) {
      auto w = co_await one_request(o, make_body(o, model, rng, o.output_tokens, prefix), pool,
                                    Clock::now());
      if (!w.ok) {
        ++ex_counts.warmup_failed;
        ex_counts.failures.push_back(std::move(w));
      }
    }
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
            [&, body = make_body(o, model, rng, out, prefix)]() -> awaitable<void> {
              const auto r = co_await one_request(o, body, pool, t0);
              --in_flight;
              ++ex_counts.requests;
              if (!r.ok) {
                ++ex_counts.failed;
                ex_counts.failures.push_back(r);
              }
              ex_counts.input_tokens += r.ok ? r.prompt_tokens : 0;
              ex_counts.output_tokens += r.ok ? r.output_tokens : 0;
              ex_counts.ramp.push_back(r);
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
          [&, i, body = make_body(o, model, rng, o.output_tokens, prefix)]() -> awaitable<void> {
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
                                     double timeout_s, const std::string& api_key,
                                     std::string* error) {
  auto fail = [&](const std::string& what, const beast::error_code& ec) {
    if (error) *error = what + " " + host + ":" + std::to_string(port) + ": " + ec.message();
    return std::pair<int, std::string>{0, ""};
  };
  asio::io_context io;
  tcp::resolver res(io);
  beast::error_code ec;
  const auto eps = res.resolve(host, std::to_string(port), ec);
  if (ec) return fail("resolve", ec);
  beast::tcp_stream s(io);
  s.expires_after(std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)));
  s.connect(eps, ec);
  if (ec) return fail("connect", ec);
  http::request<http::empty_body> req{http::verb::get, path, 11};
  req.set(http::field::host, host);
  if (!api_key.empty()) req.set(http::field::authorization, "Bearer " + api_key);
  http::write(s, req, ec);
  if (ec) return fail("send to", ec);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> p;
  p.body_limit(64u << 20);
  http::read(s, buf, p, ec);
  if (ec) return fail("read response from", ec);
  return {p.get().result_int(), p.get().body()};
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
