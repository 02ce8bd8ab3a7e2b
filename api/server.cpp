#include "api/server.h"

#include <boost/beast/websocket/rfc6455.hpp>
#include <boost/json.hpp>
#include <csignal>
#include <cstdio>
#include <ctime>

#include "api/openai_response.h"
#include "api/secret.h"
#include "api/server_impl.h"
#include "api/version.h"
#include "runtime/text/chat_template.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

namespace strata::api {

namespace json = boost::json;
using net::as_tuple;
using net::use_awaitable;

double seconds(double s) {
  return s > 0 && s < 1e6 ? s : 1e6;
}
Clock::duration to_duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds(s)));
}

std::string query_param(std::string_view query, std::string_view key) {
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view kv = query.substr(0, amp);
    const auto eq = kv.find('=');
    if (kv.substr(0, eq) == key)
      return eq == std::string_view::npos ? "" : std::string(kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return {};
}

// ---- Impl -----------------------------------------------------------------------------------

Server::Impl::Impl(ServerOptions o) : opt(std::move(o)) {
  admin_token = opt.server.admin_token;
  if (admin_token.empty()) admin_token = random_hex(16);
}

// Fresh OS randomness per id (api/secret.h): ids reveal nothing of each other or the token.
std::string Server::Impl::new_id(const char* prefix) {
  return std::string(prefix) + "-" + random_hex(12);
}

ParseContext Server::Impl::parse_context() const {
  ParseContext c;
  c.model_names = {opt.model_name};
  c.vocab_size = std::max(engine->model().vocab_size, engine->tokenizer().vocab_size());
  const auto& cfg = engine->config();
  c.max_model_len = cfg.model.max_model_len > 0 ? static_cast<int>(cfg.model.max_model_len)
                                                : engine->model().max_position_embeddings;
  c.base_profile = engine->stats().profile;
  c.num_layers = engine->model().num_hidden_layers;
  c.sparsity_override = cfg.sparsity_request_override;
  c.max_n = opt.max_n;
  return c;
}

std::string Server::Impl::token_bytes(std::int32_t id) const {
  if (!engine) return {};
  try {
    return engine->tokenizer().token_bytes(id);
  } catch (...) {
    return {};
  }
}

namespace {
bool private_route(std::string_view path) {
  return path.starts_with("/admin") || path == "/metrics";
}
std::string clip(std::string_view s) {  // for echoing client input in a message
  return s.size() <= 64 ? std::string(s) : std::string(s.substr(0, 64)) + "...";
}
}  // namespace

void Server::Impl::decorate(const Req& req, http::fields& f) const {
  f.set(http::field::server, "strata");
  auto it = req.find(http::field::origin);
  const std::string_view target = req.target();
  if (it != req.end() && !private_route(target.substr(0, target.find('?'))) &&
      policy.cors_listed(it->value())) {
    f.set(http::field::access_control_allow_origin, it->value());
    f.set(http::field::vary, "Origin");
  }
}

std::optional<ApiError> Server::Impl::refuse_caller(const Req& req, std::string_view path) const {
  const auto host = req.find(http::field::host);
  if (host == req.end() ? req.version() >= 11 : !policy.host_ok(host->value())) {
    return ApiError(421, "invalid_request_error",
                    "the Host header must name this server (got '" +
                        (host == req.end() ? std::string() : clip(host->value())) +
                        "'; other names: server.allowed_hosts)",
                    "", "misdirected_request");
  }
  std::optional<std::string_view> origin;
  if (auto it = req.find(http::field::origin); it != req.end()) origin = it->value();
  if (!policy.origin_ok(origin,
                        host == req.end() ? std::string_view() : std::string_view(host->value()),
                        private_route(path))) {
    return ApiError(403, "permission_error",
                    "requests from the origin '" + clip(*origin) + "' are not allowed" +
                        (private_route(path) ? " on " + std::string(path) + " (same origin only)"
                                             : std::string(" (server.cors_origins)")),
                    "", "origin_not_allowed");
  }
  if ((req.method() == http::verb::post || req.method() == http::verb::put) &&
      !is_json_content_type(req[http::field::content_type])) {
    return ApiError(415, "invalid_request_error",
                    "the request body must be JSON sent as Content-Type: application/json (got '" +
                        clip(req[http::field::content_type]) + "')",
                    "", "unsupported_media_type");
  }
  return std::nullopt;
}

Res Server::Impl::response(const Req& req, http::status st, std::string body,
                           const char* content_type) {
  Res res{st, req.version()};
  decorate(req, res.base());
  res.set(http::field::content_type, content_type);
  res.keep_alive(req.keep_alive() && !stopping);
  res.body() = std::move(body);
  res.prepare_payload();
  if (req.method() == http::verb::head) {  // GET's headers, Content-Length included, no body
    const auto n = res.body().size();
    res.body().clear();
    res.content_length(n);
  }
  metrics.observe_http(static_cast<int>(st));
  return res;
}

Res Server::Impl::error_response(const Req& req, const ApiError& e) {
  Res res = response(req, static_cast<http::status>(e.status), error_json(e));
  if (e.status == 401) res.set(http::field::www_authenticate, "Bearer");
  if (e.status == 429 || e.status == 503) res.set(http::field::retry_after, "1");
  return res;
}

namespace {
bool bearer_matches(const Req& req, const std::string& secret) {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return false;
  const std::string_view v = it->value();
  if (v.size() < 7 || (v.substr(0, 7) != "Bearer " && v.substr(0, 7) != "bearer ")) return false;
  return secret_equal(v.substr(7), secret);
}
}  // namespace

bool Server::Impl::api_key_ok(const Req& req) const {
  if (opt.server.api_keys.empty()) return true;
  for (const auto& k : opt.server.api_keys)
    if (bearer_matches(req, k)) return true;
  return false;
}

bool Server::Impl::admin_ok(const Req& req, std::string_view query) const {
  if (bearer_matches(req, admin_token)) return true;
  const std::string t = query_param(query, "token");
  return !t.empty() && secret_equal(t, admin_token);
}

void Server::Impl::begin_stop() {
  if (stopping) return;
  stopping = true;
  boost::system::error_code ec;
  acceptor.close(ec);
  signals.cancel(ec);
  if (engine)
    engine->shutdown(std::chrono::milliseconds(
        static_cast<long long>(seconds(opt.server.shutdown_grace_s) * 1000)));
  for (Conn* c : conns)
    if (c->idle) c->close();
  net::co_spawn(io, drain(), net::detached);
  auto closers = ws_closers;
  for (auto& [k, f] : closers) f();
}

net::awaitable<void> Server::Impl::drain() {
  const auto until =
      Clock::now() + to_duration(opt.server.shutdown_grace_s) + std::chrono::seconds(2);
  net::steady_timer t(io);
  while ((!conns.empty() || websockets > 0) && Clock::now() < until) {
    for (Conn* c : conns)
      if (c->idle) c->close();
    auto closers = ws_closers;
    for (auto& [k, f] : closers) f();
    t.expires_after(std::chrono::milliseconds(50));
    co_await t.async_wait(as_tuple(use_awaitable));
  }
  io.stop();
}

// ---- Conn -----------------------------------------------------------------------------------

Conn::Conn(Server::Impl& s, tcp::socket so) : srv(s), sock(std::move(so)), timer(srv.io) {
  srv.conns.insert(this);
}

void Conn::set_deadline(Clock::duration d) {
  deadline = Clock::now() + d;
  timer.cancel();
}
void Conn::clear_deadline() {
  deadline = Clock::time_point::max();
  timer.cancel();
}
void Conn::close() {
  boost::system::error_code ec;
  sock.shutdown(tcp::socket::shutdown_both, ec);
  sock.close(ec);
  timer.cancel();
}

net::awaitable<void> Conn::watchdog() {
  auto self = shared_from_this();
  while (sock.is_open()) {
    if (deadline <= Clock::now()) {
      timed_out = true;
      deadline = Clock::time_point::max();
      boost::system::error_code ec;
      sock.cancel(ec);
    }
    timer.expires_at(deadline);
    co_await timer.async_wait(as_tuple(use_awaitable));
  }
}

net::awaitable<bool> Conn::write(Res res) {
  set_deadline(to_duration(srv.opt.server.write_timeout_s));
  auto [ec, n] = co_await http::async_write(sock, res, as_tuple(use_awaitable));
  clear_deadline();
  co_return !ec && res.keep_alive();
}

net::awaitable<void> Conn::run() {
  auto self = shared_from_this();
  const auto header_to = to_duration(srv.opt.server.header_timeout_s);
  // The first request's head must be complete within header_timeout_s of the accept (a
  // silent socket holds its slot no longer); a later one within header_timeout_s of its
  // first byte, after at most idle_timeout_s of keep-alive idleness.
  set_deadline(header_to);
  for (bool first = true;; first = false) {
    idle = true;
    waiting = true;
    waiting_since = Clock::now();
    if (srv.stopping) break;
    if (buf.size() == 0) {  // wait for the next request's first bytes (keep-alive idle)
      if (!first) set_deadline(to_duration(srv.opt.server.idle_timeout_s));
      auto [ec, n] = co_await sock.async_read_some(buf.prepare(4096), as_tuple(use_awaitable));
      if (ec) break;
      buf.commit(n);
    }
    idle = false;
    http::request_parser<http::string_body> parser;
    parser.header_limit(16 * 1024);
    parser.body_limit(srv.opt.server.max_body_bytes);
    timed_out = false;
    if (!first) set_deadline(header_to);
    auto [hec, hn] = co_await http::async_read_header(sock, buf, parser, as_tuple(use_awaitable));
    Req dummy;  // for errors before a request exists: they close the connection
    dummy.keep_alive(false);
    if (hec) {
      clear_deadline();
      if (timed_out) {
        co_await write(srv.error_response(
            dummy, ApiError(408, "invalid_request_error",
                            "timed out reading the request header (server.header_timeout_s = " +
                                json::serialize(json::value(srv.opt.server.header_timeout_s)) + ")",
                            "", "request_timeout")));
      } else if (hec == http::error::body_limit) {  // Content-Length over the limit
        co_await write(srv.error_response(
            dummy, ApiError(413, "invalid_request_error",
                            "request body is over the limit of " +
                                std::to_string(srv.opt.server.max_body_bytes) + " bytes",
                            "", "payload_too_large")));
      } else if (hec == http::error::header_limit) {
        co_await write(srv.error_response(
            dummy, ApiError(431, "invalid_request_error", "request header too large")));
      } else if (hec != http::error::end_of_stream && hec != net::error::eof &&
                 hec != net::error::operation_aborted && hec != net::error::connection_reset) {
        co_await write(srv.error_response(
            dummy,
            ApiError(400, "invalid_request_error", "malformed HTTP request: " + hec.message())));
      }
      break;
    }
    auto& h = parser.get();
    if (const auto te = h.find(http::field::transfer_encoding);
        te != h.end() && !beast::iequals(te->value(), "chunked")) {
      clear_deadline();  // a coding stacked on chunked (gzip, chunked) would be read as plain
      co_await write(srv.error_response(
          dummy, ApiError(501, "invalid_request_error",
                          "Transfer-Encoding '" + std::string(te->value().substr(0, 64)) +
                              "' is not supported (only chunked)",
                          "", "unsupported_transfer_encoding")));
      break;
    }
    if (beast::websocket::is_upgrade(h)) {
      clear_deadline();
      const std::string target(h.target());
      if (target.substr(0, target.find('?')) != "/v1/ws") {
        co_await write(srv.error_response(
            dummy, ApiError(404, "not_found_error", "no WebSocket endpoint at " + target)));
        break;
      }
      srv.conns.erase(this);
      ++srv.websockets;
      timer.cancel();
      Req up = parser.release();
      tcp::socket s = std::move(sock);
      co_await run_websocket(srv, std::move(s), std::move(up));
      --srv.websockets;
      co_return;
    }
    if (const auto len = h.payload_size(); len && *len > srv.opt.server.max_body_bytes) {
      clear_deadline();
      co_await write(srv.error_response(
          h, ApiError(413, "invalid_request_error",
                      "request body of " + std::to_string(*len) + " bytes is over the limit of " +
                          std::to_string(srv.opt.server.max_body_bytes) + " bytes",
                      "", "payload_too_large")));
      break;
    }
    set_deadline(std::max(header_to, to_duration(30)));
    auto [bec, bn] = co_await http::async_read(sock, buf, parser, as_tuple(use_awaitable));
    clear_deadline();
    if (bec) {
      if (bec == http::error::body_limit) {
        co_await write(srv.error_response(
            dummy, ApiError(413, "invalid_request_error",
                            "request body is over the limit of " +
                                std::to_string(srv.opt.server.max_body_bytes) + " bytes",
                            "", "payload_too_large")));
      } else if (timed_out) {
        co_await write(srv.error_response(
            dummy, ApiError(408, "invalid_request_error", "timed out reading the request body", "",
                            "request_timeout")));
      } else if (bec != http::error::partial_message && bec != net::error::eof &&
                 bec != net::error::operation_aborted && bec != net::error::connection_reset) {
        co_await write(srv.error_response(  // a bad chunk size or framing
            dummy,
            ApiError(400, "invalid_request_error", "malformed request body: " + bec.message())));
      }
      break;
    }
    Req req = parser.release();
    waiting = false;
    bool keep = false;
    try {
      keep = co_await handle(req);
    } catch (...) {
      // note: handlers turn errors into responses; this is the last line of defence.
      keep = false;
    }
    if (!keep || !sock.is_open()) break;
  }
  waiting = true;
  // Lingering close: stop sending, then drain what the client still sends (an oversized body)
  // for a moment, so the kernel does not answer it with a reset that would destroy our reply.
  if (sock.is_open()) {
    boost::system::error_code ec;
    sock.shutdown(tcp::socket::shutdown_send, ec);
    set_deadline(std::chrono::seconds(2));
    std::size_t drained = 0;
    char tmp[8192];
    while (drained < (8u << 20)) {
      auto [rec, n] = co_await sock.async_read_some(net::buffer(tmp), as_tuple(use_awaitable));
      if (rec) break;
      drained += n;
    }
  }
  close();
  srv.conns.erase(this);
}

net::awaitable<bool> Conn::handle(Req& req) {
  const std::string_view target = req.target();
  const auto q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query =
      q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  const auto method = req.method();
  auto reply = [&](http::status st, std::string body, const char* ct = "application/json") {
    return write(srv.response(req, st, std::move(body), ct));
  };
  auto fail = [&](const ApiError& e) { return write(srv.error_response(req, e)); };
  std::optional<ApiError> err;

  if (auto refused = srv.refuse_caller(req, path)) co_return co_await fail(*refused);
  if (method == http::verb::options) {  // CORS preflight
    Res res = srv.response(req, http::status::no_content, "");
    res.set(http::field::access_control_allow_methods, "GET, POST, PUT, OPTIONS");
    res.set(http::field::access_control_allow_headers, "authorization, content-type");
    res.set(http::field::access_control_max_age, "600");
    co_return co_await write(std::move(res));
  }
  if (path.substr(0, 6) == "/admin") co_return co_await handle_admin(*this, req, path, query);

  std::string allow;  // the Allow header of a 405
  try {
    auto require = [&](http::verb v) {  // GET routes answer HEAD too
      if (method != v && !(v == http::verb::get && method == http::verb::head)) {
        allow = v == http::verb::get ? "GET, HEAD" : "POST";
        throw ApiError(405, "invalid_request_error",
                       std::string("method ") + std::string(req.method_string()) +
                           " not allowed on " + clip(path) + " (allowed: " + allow + ")");
      }
    };
    if (path == "/version") {
      require(http::verb::get);
      json::object v;  // note: no braced temporaries in a co_await (GCC 12 rejects them)
      v["version"] = kVersion;
      co_return co_await reply(http::status::ok, json::serialize(v));
    }
    if (path == "/health") {
      require(http::verb::get);
      if (!srv.load_error.empty())
        throw ApiError(503, "unavailable_error", "model failed to load: " + srv.load_error, "",
                       "load_failed");
      if (!srv.engine)
        throw ApiError(503, "unavailable_error", "the model is loading", "", "loading");
      if (srv.stopping)
        throw ApiError(503, "unavailable_error", "the server is shutting down", "",
                       "shutting_down");
      co_return co_await reply(http::status::ok, R"({"status":"ok"})");
    }
    if (path == "/metrics") {
      require(http::verb::get);
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
      co_return co_await reply(http::status::ok, render_metrics(srv.metrics, in),
                               "text/plain; version=0.0.4; charset=utf-8");
    }
    const bool inference = path == "/v1/completions" || path == "/v1/chat/completions" ||
                           path == "/v1/models" || path.starts_with("/v1/models/") ||
                           path == "/tokenize" || path == "/detokenize" || path == "/v1/ws";
    if (!inference)
      throw ApiError(404, "not_found_error",
                     "no route for " + std::string(req.method_string()) + " " + clip(path), "",
                     "not_found");
    if (!srv.api_key_ok(req))
      throw ApiError(401, "authentication_error",
                     "a valid API key is required (Authorization: Bearer <key>)", "",
                     "invalid_api_key");
    if (path == "/v1/ws")
      throw ApiError(426, "invalid_request_error", "/v1/ws needs a WebSocket upgrade");
    if (!srv.engine)
      throw ApiError(503, "unavailable_error",
                     srv.load_error.empty() ? "the model is loading"
                                            : "model failed to load: " + srv.load_error,
                     "", "not_ready");
    if (srv.stopping)
      throw ApiError(503, "unavailable_error", "the server is shutting down", "", "shutting_down");
    if (path == "/v1/models" || path.starts_with("/v1/models/")) {
      require(http::verb::get);
      json::object m;
      m["id"] = srv.opt.model_name;
      m["object"] = "model";
      m["created"] = static_cast<std::int64_t>(std::time(nullptr));
      m["owned_by"] = "strata";
      m["root"] = srv.engine->config().model.path;
      m["max_model_len"] = srv.parse_context().max_model_len;
      if (path.size() > 11) {  // /v1/models/{id}: that model, if it is the one served
        const std::string_view want = path.substr(11);
        if (want != srv.opt.model_name)
          throw ApiError(404, "not_found_error",
                         "the model '" + clip(want) + "' does not exist (served: '" +
                             srv.opt.model_name + "')",
                         "model", "model_not_found");
        co_return co_await reply(http::status::ok, json::serialize(m));
      }
      json::object list;
      list["object"] = "list";
      list["data"] = json::array{std::move(m)};
      co_return co_await reply(http::status::ok, json::serialize(list));
    }
    require(http::verb::post);
    if (path == "/v1/completions") co_return co_await completions(req, Endpoint::kCompletions);
    if (path == "/v1/chat/completions") co_return co_await completions(req, Endpoint::kChat);
    const auto& tok = srv.engine->tokenizer();
    if (path == "/tokenize") {
      std::vector<std::int32_t> ids;
      TokenizeRequest t;
      auto engine = srv.engine;
      const std::function<void()> job = [&] {  // megabytes take a while: not here
        t = parse_tokenize_request(parse_json_body(req.body()));
        if (!t.model.empty() && t.model != srv.opt.model_name)
          throw ApiError(404, "not_found_error",
                         "the model '" + clip(t.model) + "' does not exist (served: '" +
                             srv.opt.model_name + "')",
                         "model", "model_not_found");
        PromptInput in;  // assembled as a completion or chat request's prompt (actors/prompt.h)
        if (!t.messages.empty()) {
          in.messages = t.messages;
          in.chat = t.chat;
        } else {
          in.text = t.prompt;
        }
        in.add_special_tokens = t.add_special_tokens;
        ids = engine->prompt_ids(std::move(in));
      };
      co_await srv.offload(job);
      json::object o;
      json::array a;
      for (auto id : ids) a.push_back(id);
      o["count"] = static_cast<std::int64_t>(ids.size());
      o["max_model_len"] = srv.parse_context().max_model_len;
      o["tokens"] = std::move(a);
      if (t.return_token_strs) {
        json::array strs;
        for (auto id : ids)
          strs.push_back(json::value(tok.is_special(id) ? tok.token_bytes(id)
                                                        : vocab_string(tok.token_bytes(id))));
        o["token_strs"] = std::move(strs);
      }
      co_return co_await reply(http::status::ok, json::serialize(o));
    }
    if (path == "/detokenize") {
      const auto ids =
          parse_detokenize_request(parse_json_body(req.body()), srv.parse_context().vocab_size);
      json::object o;
      o["prompt"] = tok.decode(ids);
      co_return co_await reply(http::status::ok, json::serialize(o));
    }
    throw ApiError(404, "not_found_error", "no route for " + std::string(path));
  } catch (...) {
    err = to_api_error(std::current_exception());  // no co_await inside a handler
  }
  Res res = srv.error_response(req, *err);
  if (err->status == 405 && !allow.empty()) res.set(http::field::allow, allow);
  co_return co_await write(std::move(res));
}

// ---- Server ---------------------------------------------------------------------------------

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Server::~Server() = default;

void Server::listen() {
  auto& i = *impl_;
  boost::system::error_code ec;
  const auto addr = net::ip::make_address(i.opt.server.host, ec);
  if (ec) throw ConfigError("server.host", "not an IP address: '" + i.opt.server.host + "'");
  tcp::endpoint ep(addr, static_cast<unsigned short>(i.opt.server.port));
  i.acceptor.open(ep.protocol(), ec);
  if (!ec) i.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) i.acceptor.bind(ep, ec);
  if (!ec) i.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    throw ConfigError("server.port", "cannot listen on " + i.opt.server.host + ":" +
                                         std::to_string(i.opt.server.port) + ": " + ec.message());
  }
  i.bound_port = i.acceptor.local_endpoint().port();
}

unsigned short Server::port() const {
  return impl_->bound_port;
}
const std::string& Server::admin_token() const {
  return impl_->admin_token;
}

void Server::set_engine(std::shared_ptr<Engine> engine) {
  net::post(impl_->io, [i = impl_.get(), e = std::move(engine)]() mutable {
    i->engine = std::move(e);
    if (i->stopping && i->engine) i->engine->shutdown(std::chrono::milliseconds(0));
  });
}

void Server::set_load_error(const std::string& message) {
  net::post(impl_->io, [i = impl_.get(), message] { i->load_error = message; });
}

void Server::run() {
  auto& i = *impl_;
  if (i.opt.handle_signals) {
    i.signals.add(SIGINT);
    i.signals.add(SIGTERM);
    i.signals.async_wait([&i](boost::system::error_code ec, int) {
      if (!ec) i.begin_stop();
    });
  }
  net::co_spawn(i.io, i.accept_loop(), net::detached);
  i.io.run();
}

void Server::stop() {
  net::post(impl_->io, [i = impl_.get()] { i->begin_stop(); });
}

}  // namespace strata::api
