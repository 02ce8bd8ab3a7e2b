#include "runtime/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/yaml_util.h"

namespace strata {
using namespace yaml;

namespace {

void apply_model(const YAML::Node& n, ModelSection& m) {
  check_keys(n, "model",
             {"path", "tokenizer", "chat_template", "max_model_len", "seed", "quantization"});
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    const auto key = "model." + k;
    if (k == "path")
      m.path = read_string(kv.second, key);
    else if (k == "tokenizer")
      m.tokenizer = read_string(kv.second, key);
    else if (k == "chat_template")
      m.chat_template = read_string(kv.second, key);  // checked when the model loads
    else if (k == "max_model_len")
      m.max_model_len = read_int(kv.second, key, 0, 1 << 24);
    else if (k == "seed")
      m.seed = static_cast<std::uint64_t>(read_int(kv.second, key, 0, INT64_MAX));
    else if (k == "quantization")
      m.quantization = read_enum(kv.second, key, {"none", "fp8"}) == "fp8" ? Quantization::kFp8
                                                                           : Quantization::kNone;
  }
}

void apply_backend(const YAML::Node& n, BackendSection& b) {
  check_keys(n, "backend",
             {"kind", "threads", "tp_size", "devices", "cuda_graphs", "sparse_graphs",
              "graph_batch_sizes", "device_tables"});
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    const auto key = "backend." + k;
    if (k == "kind")
      b.kind = read_enum(kv.second, key, {"auto", "cpu", "cuda"});
    else if (k == "threads")
      b.threads = static_cast<int>(read_int(kv.second, key, 0, 1024));
    else if (k == "tp_size")
      b.tp_size = static_cast<int>(read_int(kv.second, key, 1, 64));
    else if (k == "devices") {
      b.devices.clear();
      for (auto d : read_int_list(kv.second, key, 0, 1023))
        b.devices.push_back(static_cast<int>(d));
    } else if (k == "cuda_graphs")
      b.cuda_graphs = read_bool(kv.second, key);
    else if (k == "sparse_graphs")
      b.sparse_graphs = read_bool(kv.second, key);
    else if (k == "device_tables")
      b.device_tables = read_bool(kv.second, key);
    else if (k == "graph_batch_sizes") {
      b.graph_batch_sizes.clear();
      for (auto d : read_int_list(kv.second, key, 1, 4096))
        b.graph_batch_sizes.push_back(static_cast<int>(d));
    }
  }
}

void apply_scheduler(const YAML::Node& n, SchedulerSection& s) {
  check_keys(n, "scheduler",
             {"max_num_seqs", "max_num_batched_tokens", "max_waiting", "chunked_prefill",
              "async_steps", "request_timeout_s"});
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    const auto key = "scheduler." + k;
    if (k == "max_num_seqs")
      s.max_num_seqs = static_cast<int>(read_int(kv.second, key, 1, 4096));
    else if (k == "max_num_batched_tokens")
      s.max_num_batched_tokens = static_cast<int>(read_int(kv.second, key, 16, 1 << 20));
    else if (k == "max_waiting")
      s.max_waiting = static_cast<int>(read_int(kv.second, key, 0, 1 << 20));
    else if (k == "chunked_prefill")
      s.chunked_prefill = read_bool(kv.second, key);
    else if (k == "async_steps")
      s.async_steps = read_bool(kv.second, key);
    else if (k == "request_timeout_s")
      s.request_timeout_s = read_double(kv.second, key, 0, 1e7);
  }
}

void apply_cache(const YAML::Node& n, CacheSection& c) {
  check_keys(n, "cache",
             {"kv_bytes", "kv_fraction", "cpu_kv_bytes", "shrink_running", "prefix_cache",
              "prefix_cache_fraction", "prefix_cache_bytes", "kv_dtype"});
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    const auto key = "cache." + k;
    if (k == "kv_bytes")
      c.kv_bytes = read_bytes(kv.second, key);
    else if (k == "kv_fraction")
      c.kv_fraction = read_double(kv.second, key, 0.01, 0.99);
    else if (k == "cpu_kv_bytes")
      c.cpu_kv_bytes = read_bytes(kv.second, key);
    else if (k == "shrink_running")
      c.shrink_running = read_bool(kv.second, key);
    else if (k == "prefix_cache")
      c.prefix_cache = read_bool(kv.second, key);
    else if (k == "prefix_cache_fraction")
      c.prefix_cache_fraction = read_double(kv.second, key, 0.001, 1.0);
    else if (k == "prefix_cache_bytes")
      c.prefix_cache_bytes = read_bytes(kv.second, key);
    else if (k == "kv_dtype")
      c.kv_dtype =
          read_enum(kv.second, key, {"bf16", "fp8"}) == "fp8" ? KvDtype::kFp8 : KvDtype::kBf16;
  }
}

void apply_server(const YAML::Node& n, ServerSection& s) {
  check_keys(n, "server",
             {"host", "port", "served_model_name", "api_keys", "admin_token", "cors_origins",
              "allowed_hosts", "max_body_bytes", "max_connections", "header_timeout_s",
              "idle_timeout_s", "write_timeout_s", "shutdown_grace_s", "status_log_interval_s"});
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    const auto key = "server." + k;
    if (k == "host")
      s.host = read_string(kv.second, key);
    else if (k == "port")
      s.port = static_cast<int>(read_int(kv.second, key, 0, 65535));
    else if (k == "served_model_name")
      s.served_model_name = read_string(kv.second, key);
    else if (k == "api_keys")
      s.api_keys = read_string_list(kv.second, key);
    else if (k == "admin_token")
      s.admin_token = read_string(kv.second, key);
    else if (k == "cors_origins")
      s.cors_origins = read_string_list(kv.second, key);
    else if (k == "allowed_hosts")
      s.allowed_hosts = read_string_list(kv.second, key);
    else if (k == "max_body_bytes")
      s.max_body_bytes = read_bytes(kv.second, key);
    else if (k == "max_connections")
      s.max_connections = static_cast<int>(read_int(kv.second, key, 1, 1 << 20));
    else if (k == "header_timeout_s")
      s.header_timeout_s = read_double(kv.second, key, 0.1, 3600);
    else if (k == "idle_timeout_s")
      s.idle_timeout_s = read_double(kv.second, key, 0.1, 86400);
    else if (k == "write_timeout_s")
      s.write_timeout_s = read_double(kv.second, key, 0.1, 86400);
    else if (k == "shutdown_grace_s")
      s.shutdown_grace_s = read_double(kv.second, key, 0, 3600);
    else if (k == "status_log_interval_s")
      s.status_log_interval_s = read_double(kv.second, key, 0, 86400);
  }
}

// A share in [0, 1], with the message naming what 0 means.
double read_share(const YAML::Node& n, const std::string& key, const char* zero) {
  const std::string msg = std::string("must be a share in [0, 1] (0: ") + zero + "), got ";
  try {
    return read_double(n, key, 0, 1);  // (NaN fails its range check too)
  } catch (const ConfigError&) {
    throw ConfigError(key, msg + (n.IsScalar() ? n.Scalar() : std::string("a non-number")));
  }
}

void apply_quality_monitor(const YAML::Node& n, QualityMonitorSection& q) {
  check_keys(
      n, "quality_monitor",
      {"sample_rate", "alert_below", "alert_min_samples", "restore_on_alert", "max_pending"});
  for (const auto& kv : n) {
    const auto k = kv.first.as<std::string>();
    const auto key = "quality_monitor." + k;
    if (k == "sample_rate")
      q.sample_rate = read_share(kv.second, key, "off");
    else if (k == "alert_below")
      q.alert_below = read_share(kv.second, key, "no alert");
    else if (k == "alert_min_samples")
      q.alert_min_samples = static_cast<int>(read_int(kv.second, key, 1, 1000000));
    else if (k == "restore_on_alert")
      q.restore_on_alert = read_bool(kv.second, key);
    else if (k == "max_pending")
      q.max_pending = static_cast<int>(read_int(kv.second, key, 1, 4096));
  }
}

// `request_override` is the operator's rule over per-request profiles, not part of the
// profile itself (which requests and the admin API replace).
void apply_sparsity(const YAML::Node& n, Config& c) {
  if (n.IsMap() && n["request_override"]) {
    YAML::Node profile = YAML::Clone(n);
    const auto v = read_enum(profile["request_override"], "sparsity.request_override",
                             {"off", "within-limits", "any"});
    c.sparsity_request_override = v == "off"   ? RequestOverride::kOff
                                  : v == "any" ? RequestOverride::kAny
                                               : RequestOverride::kWithinLimits;
    profile.remove("request_override");
    if (profile.size() > 0) c.sparsity = parse_sparsity_yaml(profile, c.sparsity);
    return;
  }
  c.sparsity = parse_sparsity_yaml(n, c.sparsity);
}

void apply(const YAML::Node& root, Config& c) {
  if (!root || root.IsNull()) return;
  check_keys(root, "",
             {"model", "backend", "scheduler", "cache", "sparsity", "server", "quality_monitor"});
  for (const auto& kv : root) {
    const auto k = kv.first.as<std::string>();
    if (k == "model")
      apply_model(kv.second, c.model);
    else if (k == "backend")
      apply_backend(kv.second, c.backend);
    else if (k == "scheduler")
      apply_scheduler(kv.second, c.scheduler);
    else if (k == "cache")
      apply_cache(kv.second, c.cache);
    else if (k == "sparsity")
      apply_sparsity(kv.second, c);
    else if (k == "server")
      apply_server(kv.second, c.server);
    else if (k == "quality_monitor")
      apply_quality_monitor(kv.second, c.quality_monitor);
  }
}

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("", source + ": invalid YAML: " + e.what());
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw ConfigError("", path + ": cannot open config file");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

void Config::set(const std::string& dotted, const std::string& value) {
  const auto dot = dotted.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == dotted.size())
    throw ConfigError(dotted, "expected section.key=value");
  YAML::Node root;
  root[dotted.substr(0, dot)][dotted.substr(dot + 1)] = load_yaml(value, "--set " + dotted);
  Config copy = *this;
  apply(root, copy);
  copy.validate();
  *this = copy;
}

void Config::validate() const {
  if (backend.tp_size > 1 && !backend.devices.empty() &&
      static_cast<int>(backend.devices.size()) != backend.tp_size)
    throw ConfigError("backend.devices",
                      "must list tp_size (" + std::to_string(backend.tp_size) + ") devices");
  if (scheduler.max_num_batched_tokens < scheduler.max_num_seqs)
    throw ConfigError("scheduler.max_num_batched_tokens", "must be >= scheduler.max_num_seqs");
  if (sparsity.enabled) sparsity.validate_fields();
  if (quality_monitor.restore_on_alert && quality_monitor.alert_below <= 0)
    throw ConfigError("quality_monitor.restore_on_alert",
                      "needs quality_monitor.alert_below > 0 (the threshold that triggers it)");
}

Config parse_config_yaml(const std::string& text, const std::string& source) {
  Config c;
  try {
    apply(load_yaml(text, source), c);
  } catch (const ConfigError& e) {
    throw ConfigError(
        e.key(), source + ": " + (e.key().empty() ? std::string(e.what()) : std::string(e.what())));
  }
  c.validate();
  return c;
}

Config load_config_file(const std::string& path) {
  return parse_config_yaml(read_file(path), path);
}

SparsityProfile load_sparsity_file(const std::string& path) {
  const auto root = load_yaml(read_file(path), path);
  // Either a bare profile or a config file with a `sparsity:` section.
  const YAML::Node node = root.IsMap() && root["sparsity"] ? root["sparsity"] : root;
  try {
    return parse_sparsity_yaml(node, SparsityProfile{});
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), path + ": " + e.what());
  }
}

int CacheSection::prefix_cache_pages(int num_pages, std::size_t page_bytes) const {
  std::int64_t pages = static_cast<std::int64_t>(prefix_cache_fraction * num_pages);
  if (prefix_cache_bytes > 0 && page_bytes > 0)
    pages =
        std::min<std::int64_t>(pages, static_cast<std::int64_t>(prefix_cache_bytes / page_bytes));
  return static_cast<int>(std::clamp<std::int64_t>(pages, 0, num_pages));
}

}  // namespace strata
