// The HTTP server: Boost.Beast on Asio C++20 coroutines, one coroutine per connection, one
// I/O thread (every piece of server state below is touched only on it; the engine is
// thread-safe and runs its own threads; parsing and tokenizing large bodies runs on a small
// pool). Routes: OpenAI-compatible /v1/completions and /v1/chat/completions (SSE and not),
// /v1/models[/{id}], /version, /health, /tokenize, /detokenize, /metrics, the WebSocket
// /v1/ws, and the admin console /admin + /admin/api/ (docs/api.md).
//
// Callers: Host must name this server (421), a browser Origin must be its own or allowed
// (403), POST/PUT bodies must be JSON (415). Limits: body size (413), a deadline for the whole
// request head from the accept, body and idle keep-alive deadlines (408 / close), a write
// blocked past server.write_timeout_s ends the connection or WebSocket session, a cap on open
// connections (the one waiting longest for a head is evicted, else 503). Graceful stop
// (SIGINT/SIGTERM or stop()): stop accepting, close idle keep-alive connections, let the engine
// finish running requests within server.shutdown_grace_s, then return from run().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "actors/engine.h"
#include "runtime/config.h"

namespace strata::api {

struct ServerOptions {
  ServerSection server;        // host, port, keys, token, CORS, limits, timeouts
  std::string model_name;      // served model name (/v1/models, `model` checks)
  bool handle_signals = true;  // SIGINT/SIGTERM start a graceful stop
  int max_n = 16;
  // Where the server's operator log lines go (the engine status every
  // server.status_log_interval_s, admin profile changes), one line per call without the
  // newline, on the I/O thread; empty: stderr.
  std::function<void(const std::string&)> log;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens (throws ConfigError "server.port" when the address is unusable).
  // Port 0 picks a free port: see port().
  void listen();
  unsigned short port() const;
  const std::string& admin_token() const;

  // Thread-safe. Until an engine is set, /health and inference answer 503 (loading).
  void set_engine(std::shared_ptr<Engine> engine);
  void set_load_error(const std::string& message);  // /health: 503 with the message

  // Serves on the calling thread until a graceful stop completes.
  void run();
  // Thread-safe: begins the graceful stop (what SIGTERM does).
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace strata::api
