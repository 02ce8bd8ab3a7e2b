// strata serve: the OpenAI-compatible HTTP/SSE + WebSocket server with the admin console.
// The server listens first (so /health answers 503 while the model loads), then the engine
// is created on a loader thread and handed to the server.
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "actors/engine.h"
#include "api/server.h"
#include "runtime/config.h"
#include "runtime/error.h"
#include "tools/cli/command.h"
#include "tools/cli/tp_flags.h"

#if defined(STRATA_WITH_CUDA) && __has_include("cuda/cuda_backend.h") && \
                                               __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>

#include "cuda/cuda_backend.h"
#define STRATA_SERVE_CUDA 1
#endif

namespace strata::cli {
namespace {

BackendFactory pick_backend(const Config& config) {
#ifdef STRATA_SERVE_CUDA
  int devices = 0;
  const bool gpu = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  if (config.backend.kind == "cuda" || (config.backend.kind == "auto" && gpu)) {
    if (!gpu) throw ConfigError("backend.kind", "cuda requested but no CUDA device is visible");
    return [](const Config& c) { return cuda::make_cuda_backends(c); };
  }
#else
  if (config.backend.kind == "cuda") {
    throw ConfigError("backend.kind", "cuda requested but this binary was built without CUDA");
  }
#endif
  return {};  // the CPU reference backend
}

int run(int argc, char** argv) {
  Args a(argc, argv, {"help"});
  if (a.flag("help")) {
    std::printf(
        "strata serve [--config FILE] [--model DIR] [--host ADDR] [--port N] [--sparsity FILE]\n"
        "  [--set key=value]... [--admin-token TOKEN] [--api-key KEY]... [--served-model-name "
        "NAME]\n"
        "  [--chat-template FILE | auto | llama3 | chatml | none]\n"
        "%s"
        "Serves the OpenAI-compatible API (/v1/completions, /v1/chat/completions, /v1/models),\n"
        "WebSocket /v1/ws, /health, /metrics, /tokenize, /detokenize and the admin console "
        "/admin.\n"
        "--port 0 picks a free port. Binds 127.0.0.1 unless told otherwise.\n"
        "--chat-template FILE renders chats with that Jinja template instead of the "
        "checkpoint's\n(chat_template.jinja or tokenizer_config.json); llama3 | chatml: a "
        "built-in one (docs/api.md).\n"
        "--tp-size N runs N tensor-parallel ranks in this process (docs/tensor-parallel.md).\n"
        "--tp-rank R --tp-master HOST:PORT runs rank R of N per process (CPU, or CUDA: one GPU\n"
        "per process, backend.devices[R] or R modulo the visible GPUs): rank 0 serves HTTP and\n"
        "drives the group (it listens on PORT for the rendezvous and PORT+1 for the rank\n"
        "links); a rank R > 0 serves no HTTP, it follows rank 0's steps and exits when rank 0\n"
        "stops.\n",
        kTpFlagsHelp);
    return 0;
  }
  std::vector<std::string> known = {
      "help",         "config", "model",       "host",    "port",
      "sparsity",     "set",    "admin-token", "api-key", "served-model-name",
      "chat-template"};
  known.insert(known.end(), kTpFlagNames.begin(), kTpFlagNames.end());
  a.expect_only(known);
  Config config;
  if (auto f = a.get("config")) config = load_config_file(*f);
  if (auto m = a.get("model")) config.model.path = *m;
  if (auto h = a.get("host")) config.server.host = *h;
  if (a.get("port")) config.server.port = static_cast<int>(a.get_int("port", 8000));
  if (auto s = a.get("sparsity")) config.sparsity = load_sparsity_file(*s);
  for (const auto& kv : a.all("set")) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) throw ConfigError("--set", "expects key=value, got '" + kv + "'");
    config.set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (auto t = a.get("admin-token")) config.server.admin_token = *t;
  for (const auto& k : a.all("api-key")) config.server.api_keys.push_back(k);
  if (auto n = a.get("served-model-name")) config.server.served_model_name = *n;
  if (auto t = a.get("chat-template")) config.model.chat_template = *t;
  if (config.model.path.empty())
    throw ConfigError("model.path", "required (--model DIR or the config file)");
  const TpFlags tp = read_tp_flags(a, config);
  config.validate();
  BackendFactory factory = pick_backend(config);
  const bool cuda = static_cast<bool>(factory);
  // Separate processes per rank (CPU, or CUDA: one GPU per process): a rank > 0 starts no
  // HTTP server, it follows rank 0's step plans until rank 0 stops; rank 0 serves with its
  // rank plus one proxy per remote rank (the rendezvous and the rank links run on the loader
  // thread).
  if (tp.rank && *tp.rank > 0) return tp_follower_main(tp, config, cuda);

  api::ServerOptions opt;
  opt.server = config.server;
  opt.model_name = config.server.served_model_name;
  if (opt.model_name.empty()) {
    opt.model_name = std::filesystem::path(config.model.path).filename().string();
    if (opt.model_name.empty()) opt.model_name = config.model.path;
  }
  if (tp.rank) factory = tp_rank0_factory(tp, cuda);
  api::Server server(opt);
  server.listen();
  const std::string host = config.server.host == "0.0.0.0" ? "127.0.0.1" : config.server.host;
  const std::string base = "http://" + host + ":" + std::to_string(server.port());
  std::printf("strata serve: model %s (%s backend), listening on %s:%u\n",
              config.model.path.c_str(), cuda ? "cuda" : "cpu", config.server.host.c_str(),
              server.port());
  std::printf("  chat:      %s/v1/chat/completions\n", base.c_str());
  std::printf("  websocket: ws://%s:%u/v1/ws\n", host.c_str(), server.port());
  std::printf("  admin:     %s/admin?token=%s\n", base.c_str(), server.admin_token().c_str());
  std::printf("  admin token: %s\n", server.admin_token().c_str());
  std::fflush(stdout);

  std::atomic<bool> load_failed{false};
  std::thread loader([&] {
    try {
      std::shared_ptr<Engine> engine = Engine::create(config, factory);
      server.set_engine(std::move(engine));
      std::printf("strata serve: model loaded, ready\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata serve: model failed to load: %s\n", e.what());
      server.set_load_error(e.what());
      load_failed = true;
      server.stop();  // a server that cannot load its model exits (non-zero) for its supervisor
    }
    std::fflush(stdout);
  });
  server.run();
  loader.join();
  std::printf("strata serve: stopped\n");
  return load_failed ? 3 : 0;
}

}  // namespace
STRATA_COMMAND("serve", "serve the OpenAI-compatible API, WebSocket chat and admin console", run);
}  // namespace strata::cli
