// The server's shared state (Server::Impl): ids, the parse context, responses and their CORS
// headers, the caller checks (Host, Origin, Content-Type) and credentials, the graceful stop;
// and the public Server. The transport is api/connection.cpp, the routes api/routes.{h,cpp}
// and api/handlers_*.cpp.
#include "api/server.h"

#include <csignal>
#include <cstdio>

#include "api/openai_response.h"
#include "api/secret.h"
#include "api/server_impl.h"
#include "api/status_log.h"
#include "runtime/error.h"
#include "runtime/text/tokenizer.h"

namespace strata::api {

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
}  // namespace

std::string clip(std::string_view s) {
  return s.size() <= 64 ? std::string(s) : std::string(s.substr(0, 64)) + "...";
}

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

void Server::Impl::log(const std::string& line) const {
  if (opt.log)
    opt.log(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
}

net::awaitable<void> Server::Impl::status_log_loop() {
  const auto interval = to_duration(opt.server.status_log_interval_s);
  status_timer.emplace(io);
  std::optional<EngineStats> prev;
  auto prev_at = Clock::now();
  bool logged_idle = false;
  while (!stopping) {
    status_timer->expires_after(interval);
    auto [ec] = co_await status_timer->async_wait(net::as_tuple(net::use_awaitable));
    if (ec || stopping) break;
    if (!engine) continue;
    const auto now_at = Clock::now();
    EngineStats now = engine->stats();
    if (!prev) prev = EngineStats{};  // first interval: counted from the engine's start
    const bool active = status_active(*prev, now);
    if (active || !logged_idle)
      log(status_line(*prev, now, std::chrono::duration<double>(now_at - prev_at).count()));
    logged_idle = !active;
    prev = std::move(now);
    prev_at = now_at;
  }
}

void Server::Impl::begin_stop() {
  if (stopping) return;
  stopping = true;
  boost::system::error_code ec;
  if (status_timer) status_timer->cancel();
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
  if (i.opt.server.status_log_interval_s > 0)
    net::co_spawn(i.io, i.status_log_loop(), net::detached);
  i.io.run();
}

void Server::stop() {
  net::post(impl_->io, [i = impl_.get()] { i->begin_stop(); });
}

}  // namespace strata::api
