// WebSocket /v1/ws: JSON events in the style of OpenAI's Realtime API (docs/api.md).
// One reader coroutine per socket, one writer draining a channel, one coroutine per
// response in flight. A malformed event gets an `error` event; the socket stays open.
#include <boost/asio/experimental/channel.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <map>

#include "api/openai_response.h"
#include "api/secret.h"
#include "api/server_impl.h"

namespace strata::api {

namespace json = boost::json;
namespace websocket = beast::websocket;
using net::as_tuple;
using net::use_awaitable;

namespace {

constexpr int kMaxInFlight = 16;

// Ending: end() closes the socket and cancels the event channel, which completes every
// pending operation (the reader's read, the writer's write, and senders blocked on a full
// channel: closing a channel alone wakes only receivers). It runs when the writer fails,
// when a write stays blocked past server.write_timeout_s (the peer stopped reading), and
// when the reader ends; so a session ends within write_timeout_s of its socket going.
struct WsSession : std::enable_shared_from_this<WsSession> {
  WsSession(Server::Impl& s, tcp::socket sock)
      : srv(s), ws(std::move(sock)), out(srv.io, 1024), stall(srv.io) {}
  Server::Impl& srv;
  websocket::stream<tcp::socket> ws;
  net::experimental::channel<void(boost::system::error_code, std::string)> out;
  net::steady_timer stall;  // expires when the write in progress has been blocked too long
  std::map<std::string, bool> inflight;  // response id -> cancel requested
  std::uint64_t seq = 0;
  bool closed = false;

  void end() {
    if (closed) return;
    closed = true;
    out.cancel();
    out.close();
    stall.cancel();
    boost::system::error_code ec;
    ws.next_layer().shutdown(tcp::socket::shutdown_both, ec);
    ws.next_layer().close(ec);
  }

  // Returns at once when the session has ended; otherwise waits while the queue is full.
  net::awaitable<void> emit(json::object ev) {
    if (closed) co_return;
    ev["event_id"] = "event_" + std::to_string(++seq);
    co_await out.async_send(boost::system::error_code{}, json::serialize(ev),
                            as_tuple(use_awaitable));
  }

  net::awaitable<void> emit_error(const ApiError& e, const std::string& client_event_id) {
    json::object err;
    err["type"] = e.type;
    err["code"] = e.code.empty() ? json::value(nullptr) : json::value(e.code);
    err["message"] = e.what();
    err["param"] = e.param.empty() ? json::value(nullptr) : json::value(e.param);
    err["event_id"] = client_event_id.empty() ? json::value(nullptr) : json::value(client_event_id);
    json::object ev;
    ev["type"] = "error";
    ev["error"] = std::move(err);
    co_await emit(std::move(ev));
  }

  net::awaitable<void> writer() {
    auto self = shared_from_this();
    for (;;) {
      auto [ec, msg] = co_await out.async_receive(as_tuple(use_awaitable));
      if (ec || closed) break;
      ws.text(true);
      stall.expires_after(to_duration(srv.opt.server.write_timeout_s));
      auto [wec, n] = co_await ws.async_write(net::buffer(msg), as_tuple(use_awaitable));
      stall.expires_at(Clock::time_point::max());
      if (wec) break;
    }
    end();
  }

  net::awaitable<void> stall_watch() {
    auto self = shared_from_this();
    while (!closed) {
      auto [ec] = co_await stall.async_wait(as_tuple(use_awaitable));
      // note: re-arming the timer cancels the wait (ec set); only a real expiry ends it.
      if (!ec && !closed && stall.expiry() <= Clock::now()) end();
    }
  }

  net::awaitable<void> respond(std::string id, std::shared_ptr<TokenStream> ts, int n) {
    auto self = shared_from_this();
    std::vector<std::string> text(static_cast<std::size_t>(n));
    std::vector<std::string> finish(static_cast<std::size_t>(n));
    Usage usage;
    bool have_usage = false;
    std::string failure;
    try {
      while (auto ev = co_await ts->next()) {
        if (ev->usage) {
          usage = *ev->usage;
          have_usage = true;
          srv.metrics.observe_request(*ev->usage, ev->finish);
        }
        if (ev->finish == FinishReason::kError) {
          failure = ev->error.empty() ? "generation failed" : ev->error;
          break;
        }
        if (ev->index < 0 || ev->index >= n) continue;
        const auto i = static_cast<std::size_t>(ev->index);
        if (!ev->text.empty()) {
          text[i] += ev->text;
          json::object d;
          d["type"] = "response.output_text.delta";
          d["response_id"] = id;
          d["output_index"] = ev->index;
          d["content_index"] = 0;
          d["delta"] = ev->text;
          co_await emit(std::move(d));
        }
        if (ev->finish != FinishReason::kNone) finish[i] = finish_reason_name(ev->finish);
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty() && srv.engine) srv.engine->abort(id);
    const bool cancelled = inflight[id];
    inflight.erase(id);
    std::string status = "completed", reason;
    for (const auto& f : finish) {
      if (f == "abort" || f.empty()) status = "cancelled";
      if ((f == "length" || f == "timeout") && status == "completed") {
        status = "incomplete";
        reason = f == "length" ? "max_output_tokens" : "timeout";
      }
    }
    if (cancelled) status = "cancelled", reason = "client_cancelled";
    if (!failure.empty()) status = "failed", reason = failure;
    json::object r;
    r["id"] = id;
    r["object"] = "realtime.response";
    r["status"] = status;
    json::object details;
    details["type"] = status;
    details["reason"] = reason.empty() ? json::value(nullptr) : json::value(reason);
    r["status_details"] = std::move(details);
    json::array output;
    for (int i = 0; i < n; ++i) {
      json::object o;
      o["index"] = i;
      o["text"] = text[static_cast<std::size_t>(i)];
      o["finish_reason"] = finish[static_cast<std::size_t>(i)].empty()
                               ? json::value(nullptr)
                               : json::value(finish[static_cast<std::size_t>(i)]);
      output.push_back(std::move(o));
    }
    r["output"] = std::move(output);
    if (have_usage) {
      json::object u;
      u["input_tokens"] = usage.prompt_tokens;
      u["output_tokens"] = usage.completion_tokens;
      u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
      u["input_token_details"] = json::object{{"cached_tokens", usage.cached_tokens}};
      u["strata"] = usage_json(usage).at("strata");
      r["usage"] = std::move(u);
    } else {
      r["usage"] = nullptr;
    }
    json::object done;
    done["type"] = "response.done";
    done["response"] = std::move(r);
    co_await emit(std::move(done));
  }

  net::awaitable<void> on_create(const json::object& ev, const std::string& event_id) {
    std::optional<ApiError> err;
    std::string id;
    std::shared_ptr<TokenStream> ts;
    int n = 1;
    try {
      if (!srv.engine)
        throw ApiError(503, "unavailable_error", "the model is loading", "", "not_ready");
      if (srv.stopping)
        throw ApiError(503, "unavailable_error", "the server is shutting down", "",
                       "shutting_down");
      if (static_cast<int>(inflight.size()) >= kMaxInFlight) {
        throw ApiError(
            429, "overloaded_error",
            "at most " + std::to_string(kMaxInFlight) + " responses in flight per socket", "",
            "too_many_responses");
      }
      json::object body;
      if (auto it = ev.find("response"); it != ev.end()) {
        if (!it->value().is_object()) throw bad_request("response", "'response' must be an object");
        body = it->value().as_object();
      }
      body.erase("stream");
      body.erase("stream_options");
      body.erase("modalities");
      body.erase("metadata");
      if (auto it = body.find("max_output_tokens"); it != body.end()) {
        json::value v = it->value();
        body.erase(it);
        if (!v.is_string()) body["max_tokens"] = v;  // "inf": the default
      }
      const bool chat = body.contains("messages") || body.contains("instructions");
      if (auto it = body.find("instructions"); it != body.end()) {
        if (!it->value().is_string())
          throw bad_request("response.instructions", "'instructions' must be a string");
        json::array msgs;
        msgs.push_back(json::object{{"role", "system"}, {"content", it->value()}});
        if (auto m = body.find("messages"); m != body.end() && m->value().is_array())
          for (const auto& x : m->value().as_array()) msgs.push_back(x);
        body.erase("instructions");
        body["messages"] = std::move(msgs);
      }
      auto pr = parse_openai_request(body, chat ? Endpoint::kChat : Endpoint::kCompletions,
                                     srv.parse_context());
      if (pr.echo) throw bad_request("response.echo", "'echo' is not supported on /v1/ws");
      if (!pr.more_prompts.empty())
        throw bad_request("response.prompt", "batched prompts are not supported on /v1/ws");
      if (pr.prompt_logprobs_field)
        throw bad_request("response.prompt_logprobs",
                          "'prompt_logprobs' is not supported on /v1/ws");
      id = srv.new_id("resp");
      pr.request.id = id;
      n = pr.request.n;
      ts = srv.engine->submit(pr.request);
    } catch (...) {
      err = to_api_error(std::current_exception());
    }
    if (err) {
      co_await emit_error(*err, event_id);
      co_return;
    }
    inflight[id] = false;
    json::object r;
    r["id"] = id;
    r["object"] = "realtime.response";
    r["status"] = "in_progress";
    r["output"] = json::array();
    r["usage"] = nullptr;
    json::object created;
    created["type"] = "response.created";
    created["response"] = std::move(r);
    co_await emit(std::move(created));
    net::co_spawn(srv.io, respond(id, ts, n), net::detached);
  }

  net::awaitable<void> on_cancel(const json::object& ev, const std::string& event_id) {
    std::vector<std::string> ids;
    if (auto it = ev.find("response_id"); it != ev.end() && !it->value().is_null()) {
      if (!it->value().is_string()) {
        co_await emit_error(bad_request("response_id", "'response_id' must be a string"), event_id);
        co_return;
      }
      const std::string id(it->value().as_string());
      if (!inflight.count(id)) {
        co_await emit_error(ApiError(400, "invalid_request_error",
                                     "no response '" + id + "' in flight on this socket",
                                     "response_id", "response_not_found"),
                            event_id);
        co_return;
      }
      ids.push_back(id);
    } else {
      for (const auto& [id, c] : inflight) ids.push_back(id);
    }
    for (const auto& id : ids) {
      inflight[id] = true;
      if (srv.engine) srv.engine->abort(id);  // pages are free within one step
    }
  }

  net::awaitable<void> reader() {
    for (;;) {
      beast::flat_buffer b;
      auto [ec, nread] = co_await ws.async_read(b, as_tuple(use_awaitable));
      if (ec) break;
      if (!ws.got_text()) {
        co_await emit_error(bad_request("", "binary frames are not supported: send JSON text"), "");
        continue;
      }
      const std::string text = beast::buffers_to_string(b.data());
      std::string event_id;
      std::optional<ApiError> err;
      try {
        const json::value v = parse_json_body(text);
        if (!v.is_object()) throw bad_request("", "an event must be a JSON object");
        const auto& o = v.as_object();
        if (auto it = o.find("event_id"); it != o.end() && it->value().is_string())
          event_id = std::string(it->value().as_string());
        auto t = o.find("type");
        if (t == o.end() || !t->value().is_string())
          throw bad_request("type", "an event needs a string 'type'");
        const std::string type(t->value().as_string());
        if (type == "response.create") {
          co_await on_create(o, event_id);
        } else if (type == "response.cancel") {
          co_await on_cancel(o, event_id);
        } else {
          throw bad_request("type", "unknown event type '" + type +
                                        "' (supported: response.create, response.cancel)");
        }
      } catch (...) {
        err = to_api_error(std::current_exception());
      }
      if (err) co_await emit_error(*err, event_id);
    }
  }
};

}  // namespace

net::awaitable<void> run_websocket(Server::Impl& srv, tcp::socket sock, Req req) {
  const std::string_view target = req.target();
  const auto q = target.find('?');
  const std::string key =
      q == std::string_view::npos ? "" : query_param(target.substr(q + 1), "api_key");
  std::optional<ApiError> refuse = srv.refuse_caller(req, "/v1/ws");
  if (!refuse && !srv.api_key_ok(req)) {
    bool ok = false;
    for (const auto& k : srv.opt.server.api_keys) ok = ok || (!key.empty() && secret_equal(key, k));
    if (!ok)
      refuse = ApiError(401, "authentication_error", "a valid API key is required", "",
                        "invalid_api_key");
  }
  if (!refuse && srv.stopping)
    refuse = ApiError(503, "unavailable_error", "the server is shutting down");
  if (refuse) {
    Res res = srv.error_response(req, *refuse);
    res.keep_alive(false);
    co_await http::async_write(sock, res, as_tuple(use_awaitable));
    boost::system::error_code ec;
    sock.close(ec);
    co_return;
  }
  auto s = std::make_shared<WsSession>(srv, std::move(sock));
  s->ws.read_message_max(1u << 20);
  s->ws.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  s->ws.set_option(websocket::stream_base::decorator(
      [](websocket::response_type& r) { r.set(http::field::server, "strata"); }));
  auto [aec] = co_await s->ws.async_accept(req, as_tuple(use_awaitable));
  if (aec) co_return;
  srv.metrics.observe_http(101);
  auto closer = [w = std::weak_ptr<WsSession>(s)] {
    if (auto p = w.lock(); p && p->inflight.empty()) {
      boost::system::error_code ec;
      p->ws.next_layer().close(ec);
    }
  };
  srv.ws_closers[s.get()] = closer;
  s->stall.expires_at(Clock::time_point::max());
  net::co_spawn(srv.io, s->stall_watch(), net::detached);
  net::co_spawn(srv.io, s->writer(), net::detached);
  co_await s->reader();
  srv.ws_closers.erase(s.get());
  s->end();
  for (auto& [id, c] : s->inflight)
    if (srv.engine) srv.engine->abort(id);  // the client is gone: free its pages
}

}  // namespace strata::api
