// /admin (the console page) and /admin/api/* (JSON): profile GET/PUT/POST, stats, config,
// live SSE stream. Every route needs the admin token (Authorization: Bearer, or ?token= for
// the page and EventSource, which cannot set headers): the route table (api/routes.cpp)
// checks it, and the methods, before a handler here runs.
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/json.hpp>

#include "api/admin_page.h"
#include "api/admin_stats.h"
#include "api/openai_response.h"
#include "api/routes.h"
#include "runtime/error.h"

namespace strata::api {

namespace json = boost::json;
using namespace boost::asio::experimental::awaitable_operators;
using net::as_tuple;
using net::use_awaitable;

namespace {

json::object stats_json(Server::Impl& srv, const EngineStats& s) {
  json::object o;
  o["t"] = std::chrono::duration<double>(Clock::now() - srv.started).count();
  o["running"] = s.running;
  o["waiting"] = s.waiting;
  o["preempted"] = s.preempted;
  o["steps"] = s.steps;
  o["preemptions"] = s.preemptions;
  o["prompt_tokens_total"] = s.prompt_tokens_total;
  o["generation_tokens_total"] = s.generation_tokens_total;
  o["requests_finished"] = s.requests_finished;
  o["requests_aborted"] = s.requests_aborted;
  o["requests_refused"] = s.requests_refused;
  o["pages_total"] = s.pages_total;
  o["pages_used"] = s.pages_used;
  o["kv_usage"] = s.kv_usage;
  json::array per_layer;
  for (int p : s.pages_per_layer) per_layer.push_back(p);
  o["pages_per_layer"] = std::move(per_layer);
  std::vector<LayerRule> rules;
  try {
    rules = s.profile.resolve(srv.engine->model().num_hidden_layers);
  } catch (const std::exception&) {
  }
  json::object groups;
  for (const auto& [g, n] : pages_by_group(s.pages_per_layer, rules)) groups[g] = n;
  o["pages_by_group"] = std::move(groups);
  o["page_bytes"] = s.page_bytes;
  o["layers"] = layers_json(s, srv.engine->model().num_hidden_layers);  // api/admin_stats.h
  o["compression_ratio"] = s.compression_ratio;
  o["mean_batch"] = s.mean_batch;
  o["host_overhead"] = s.host_overhead;
  o["profile_version"] = s.profile_version;
  o["ttft_ms_recent"] = srv.metrics.recent_ttft_mean_ms();
  o["tokens_per_s"] = 0.0;
  return o;
}

json::object profile_json(Server::Impl& srv, SparsityProfile p, std::uint64_t version) {
  p.version = version;  // the body's profile is the one published as `version`
  json::object o;
  o["version"] = version;
  o["profile"] = to_json(p);
  o["model"] = srv.opt.model_name;
  const int layers = srv.engine->model().num_hidden_layers;
  o["num_layers"] = layers;
  json::array rules;
  try {
    for (const auto& r : p.resolve(layers)) {
      json::object x;
      x["policy"] = to_string(r.policy);
      x["capacity"] = r.capacity;
      rules.push_back(std::move(x));
    }
  } catch (const std::exception&) {
  }
  o["layers"] = std::move(rules);
  return o;
}

// Who asked, for the log: the admin (one token) at its peer address, with its User-Agent.
std::string who(Conn& c, const Req& req) {
  std::string w = "admin";
  boost::system::error_code ec;
  const auto ep = c.sock.remote_endpoint(ec);
  if (!ec) w += " at " + ep.address().to_string() + ":" + std::to_string(ep.port());
  if (const auto ua = req[http::field::user_agent]; !ua.empty()) {
    std::string u(ua.substr(0, 80));
    for (char& ch : u)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
    w += " (" + u + ")";
  }
  return w;
}

// What changed: "capacity 512 -> 256, window 32 -> 16", field by field of the profile JSON.
std::string changes(const SparsityProfile& from, const SparsityProfile& to) {
  const json::object a = to_json(from).as_object();
  const json::object b = to_json(to).as_object();
  std::string out;
  for (const auto& [k, v] : b) {
    const auto* old = a.if_contains(k);
    if (k == "version" || (old && *old == v)) continue;
    if (!out.empty()) out += ", ";
    out += std::string(k) + " " + (old ? json::serialize(*old) : std::string("(unset)")) + " -> " +
           json::serialize(v);
  }
  return out.empty() ? "no field changed" : out;
}

}  // namespace

net::awaitable<bool> handle_admin_page(Conn& c, Req& req, const RouteArgs&) {
  Res res = c.srv.response(req, http::status::ok, kAdminPage, "text/html; charset=utf-8");
  res.set(http::field::cache_control, "no-store");
  co_return co_await c.write(std::move(res));
}

net::awaitable<bool> handle_admin_profile(Conn& c, Req& req, const RouteArgs&) {
  Server::Impl& srv = c.srv;
  if (req.method() == http::verb::get || req.method() == http::verb::head) {
    const auto s = srv.engine->stats();
    co_return co_await c.write(srv.response(
        req, http::status::ok, json::serialize(profile_json(srv, s.profile, s.profile_version))));
  }
  const json::value body = parse_json_body(req.body());  // PUT or POST
  const auto current = srv.engine->stats().profile;
  // A profile refused by the parser, the depth checks or the engine: logged, 400 naming the key.
  const auto rejected = [&](const ConfigError& e) {
    srv.log("strata serve: sparsity profile change by " + who(c, req) + " rejected: " + e.what());
    return bad_request(e.key(), e.what());
  };
  SparsityProfile p;
  try {
    p = parse_sparsity_json(body, current, "sparsity");
    (void)p.resolve(srv.engine->model().num_hidden_layers);  // depth-dependent checks
  } catch (const ConfigError& e) {
    throw rejected(e);
  }
  // A PUT that changes nothing publishes nothing (no new version, no re-plan).
  const auto running = srv.engine->stats();
  auto same = p;
  same.version = running.profile.version;
  json::object out;
  if (same == running.profile) {
    out = profile_json(srv, running.profile, running.profile_version);
    out["published"] = false;
  } else {
    std::uint64_t v = 0;
    try {
      v = srv.engine->update_sparsity(p);  // the engine's own checks (the backend's kernels)
    } catch (const ConfigError& e) {
      throw rejected(e);
    }
    srv.log("strata serve: sparsity profile v" + std::to_string(running.profile_version) + " -> v" +
            std::to_string(v) + " published by " + who(c, req) + ": " +
            changes(running.profile, p));
    out = profile_json(srv, p, v);
    out["published"] = true;
  }
  co_return co_await c.write(srv.response(req, http::status::ok, json::serialize(out)));
}

net::awaitable<bool> handle_admin_stats(Conn& c, Req& req, const RouteArgs&) {
  Server::Impl& srv = c.srv;
  co_return co_await c.write(
      srv.response(req, http::status::ok, json::serialize(stats_json(srv, srv.engine->stats()))));
}

net::awaitable<bool> handle_admin_config(Conn& c, Req& req, const RouteArgs&) {
  Server::Impl& srv = c.srv;
  const auto& cfg = srv.engine->config();
  json::object o;
  o["model"] = srv.opt.model_name;
  o["model_path"] = cfg.model.path;
  o["backend"] = cfg.backend.kind;
  o["tp_size"] = cfg.backend.tp_size;
  o["max_num_seqs"] = cfg.scheduler.max_num_seqs;
  o["max_num_batched_tokens"] = cfg.scheduler.max_num_batched_tokens;
  o["max_waiting"] = cfg.scheduler.max_waiting;
  o["shrink_running"] = cfg.cache.shrink_running;
  co_return co_await c.write(srv.response(req, http::status::ok, json::serialize(o)));
}

// The live statistics as SSE, every interval_ms (50 ... 10000, default 500), until the client
// goes or the server stops; the stream ends the connection.
net::awaitable<bool> handle_admin_stream(Conn& c, Req& req, const RouteArgs& a) {
  Server::Impl& srv = c.srv;
  long interval_ms = 500;
  if (const auto q = query_param(a.query, "interval_ms"); !q.empty()) {
    try {
      interval_ms = std::clamp(std::stol(q), 50L, 10000L);
    } catch (const std::exception&) {
      throw bad_request("interval_ms", "'interval_ms' must be an integer");
    }
  }
  http::response<http::empty_body> head{http::status::ok, req.version()};
  srv.decorate(req, head.base());
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.keep_alive(false);
  head.chunked(true);
  srv.metrics.observe_http(200);
  http::response_serializer<http::empty_body> sr{head};
  auto [hec, hn] = co_await http::async_write_header(c.sock, sr, as_tuple(use_awaitable));
  if (hec) co_return false;
  std::string side;
  bool gone = false;
  auto pump = [&]() -> net::awaitable<void> {
    net::steady_timer t(srv.io);
    std::uint64_t last_gen = 0;
    auto last_t = Clock::now();
    bool first = true;
    while (!srv.stopping && srv.engine) {
      const auto s = srv.engine->stats();
      auto o = stats_json(srv, s);
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - last_t).count();
      if (!first && dt > 0)
        o["tokens_per_s"] = static_cast<double>(s.generation_tokens_total - last_gen) / dt;
      first = false;
      last_gen = s.generation_tokens_total;
      last_t = now;
      const std::string ev = sse_data(json::serialize(o));
      c.set_deadline(to_duration(srv.opt.server.write_timeout_s));
      auto [ec, n] = co_await net::async_write(c.sock, http::make_chunk(net::buffer(ev)),
                                               as_tuple(use_awaitable));
      c.clear_deadline();
      if (ec) co_return;
      t.expires_after(std::chrono::milliseconds(interval_ms));
      co_await t.async_wait(as_tuple(use_awaitable));
    }
  };
  co_await (pump() || c.watch_close({}, &side, &gone));
  co_return false;  // the stream ends the connection
}

}  // namespace strata::api
