// The server/engine configuration, from YAML (yaml-cpp). Unknown keys and bad values throw
// ConfigError naming the key (e.g. "scheduler.max_num_seqs") and the allowed values.
// Command-line flags override file values (tools/cli applies them through set()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kv_layout.h"
#include "runtime/sparsity_profile.h"

namespace strata {

// model.quantization: how the backend holds the linear layers (q/k/v/o/gate/up/down).
// kFp8: e4m3 weights with per-output-channel scales and per-token e4m3 activations (W8A8,
// docs/cpu-backend.md "FP8"); embeddings, norms and lm_head stay as they are.
enum class Quantization : std::uint8_t { kNone, kFp8 };

struct ModelSection {
  std::string path;  // HF model directory, or "random:<preset>" (CUDA)
  // Tokenizer for "random:" models (weights built on the device): a tokenizer.json, or a
  // directory holding tokenizer.json [+ tokenizer_config.json]. Ignored for directories.
  std::string tokenizer;
  // auto | llama3 | chatml | none | a Jinja template file (runtime/text/chat_template.h)
  std::string chat_template = "auto";
  std::int64_t max_model_len = 0;                   // 0: the model's max_position_embeddings
  std::uint64_t seed = 0;                           // random:<preset> weights
  Quantization quantization = Quantization::kNone;  // none | fp8
};

struct BackendSection {
  std::string kind = "auto";  // auto | cpu | cuda
  int threads = 0;            // CPU backend threads, 0 = all cores
  int tp_size = 1;
  std::vector<int> devices;  // CUDA device ordinals; empty: 0 .. tp_size-1
  bool cuda_graphs = true;
  // CUDA graphs also for decode steps that touch sparse layers (off: those run eagerly). On by
  // default since graph replay equals eager bitwise in the sparse model tests (issue 24).
  bool sparse_graphs = true;
  std::vector<int> graph_batch_sizes;  // decode buckets; empty: backend default
  // CUDA: page tables stay on the device and each step uploads only what changed (issue 24;
  // off: every step uploads whole tables, the path before).
  bool device_tables = true;
};

struct SchedulerSection {
  int max_num_seqs = 64;
  int max_num_batched_tokens = 4096;
  int max_waiting = 256;  // beyond it requests are refused as overloaded
  bool chunked_prefill = true;
  // Pipelined step loop (docs/actors.md "Pipelined steps"): the batcher plans and submits step
  // n+1 before it collects step n (Backend::submit/collect); outputs are identical. On by
  // default since 2026-12-02 (gpu_async_steps_test passed on the H200; issue 24); false: the
  // synchronous loop through Backend::step.
  bool async_steps = true;
  double request_timeout_s = 600;  // per-request deadline (0: none)
};

struct CacheSection {
  std::uint64_t kv_bytes = 0;                 // cap on the KV pool in bytes (0: no cap)
  double kv_fraction = 0.9;                   // fraction of free device memory after weights (CUDA)
  std::uint64_t cpu_kv_bytes = 512ull << 20;  // CPU backend pool size
  bool shrink_running = false;                // live profile shrinks apply to running sequences
  // bf16 (the backend's native type) | fp8: K and V as e4m3 with fixed per-(layer, KV head) fp32
  // scales, from the checkpoint's kv_cache_scheme or calibrated once at start-up
  // (runtime/kv_scales.h, docs/kv-fp8.md); pages are half the bytes.
  KvDtype kv_dtype = KvDtype::kBf16;
  // Automatic prefix caching (docs/sparsity.md "Prefix cache"): full prompt blocks stay in the
  // pool, shared by later requests with the same prefix, evicted LRU when pages are needed.
  bool prefix_cache = true;
  double prefix_cache_fraction = 1.0;    // most of the pool cached blocks may hold (0 ... 1]
  std::uint64_t prefix_cache_bytes = 0;  // most KV bytes cached blocks may hold (0: no byte cap)
  // Pages cached blocks may hold in a pool of num_pages pages of page_bytes each: the smaller of
  // the fraction's and the byte cap's (at least 0).
  int prefix_cache_pages(int num_pages, std::size_t page_bytes) const;
};

struct ServerSection {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string served_model_name;      // default: directory name
  std::vector<std::string> api_keys;  // empty: inference needs no key
  std::string admin_token;            // empty: generated at start and printed
  std::vector<std::string> cors_origins;
  // Host header values accepted besides loopback names and the bound address ("*": any);
  // anything else gets 421 (DNS rebinding).
  std::vector<std::string> allowed_hosts;
  std::uint64_t max_body_bytes = 8ull << 20;
  int max_connections = 1024;
  double header_timeout_s = 10;
  double idle_timeout_s = 120;
  double write_timeout_s = 30;  // a write blocked that long (peer not reading) ends the connection
  double shutdown_grace_s = 10;
  double status_log_interval_s = 10;  // the one-line engine status on stderr; 0: off
};

// The live quality guardrail (docs/sparsity.md "Quality guardrail"): a share of finished
// requests is replayed through the full cache at the lowest priority and compared per position.
struct QualityMonitorSection {
  double sample_rate = 0.01;  // share of finished requests replayed, [0, 1]; 0: off
  // Alert when a profile version's agreement interval lies wholly below this ([0, 1]; 0: off)
  // once it has alert_min_samples replays.
  double alert_below = 0;
  int alert_min_samples = 20;
  bool restore_on_alert = false;  // on an alert of the current version: republish the previous
  int max_pending = 16;           // replays queued at most; more samples are dropped (counted)
};

// sparsity.request_override: what a request's `kv_sparsity` may change. kWithinLimits: only
// lower capacity and window below the operator's profile (never disable sparsity or use
// more KV); kOff: refused; kAny: any valid profile.
enum class RequestOverride : std::uint8_t { kOff, kWithinLimits, kAny };

struct Config {
  ModelSection model;
  BackendSection backend;
  SchedulerSection scheduler;
  CacheSection cache;
  SparsityProfile sparsity;
  RequestOverride sparsity_request_override = RequestOverride::kWithinLimits;
  ServerSection server;
  QualityMonitorSection quality_monitor;

  // Sets one dotted key from a string (flags: --set scheduler.max_num_seqs=8).
  void set(const std::string& dotted_key, const std::string& value);
  void validate() const;
};

Config load_config_file(const std::string& path);  // throws ConfigError
Config parse_config_yaml(const std::string& text, const std::string& source);
SparsityProfile load_sparsity_file(const std::string& path);  // a file holding one profile

}  // namespace strata
