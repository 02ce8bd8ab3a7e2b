#include "runtime/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/error.h"

namespace strata {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    parse_config_yaml(yaml, "test.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Config, ParsesEverySection) {
  const auto c = parse_config_yaml(R"(
model: {path: /m, chat_template: llama3, max_model_len: 4096}
backend: {kind: cpu, threads: 2}
scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512, max_waiting: 32, chunked_prefill: false}
cache: {kv_bytes: 8GiB, kv_fraction: 0.5}
sparsity: {full_layers: 2, policy: snapkv, capacity: 128, window: 16, sinks: 2, pool: avg, pool_kernel: 5}
server: {host: 0.0.0.0, port: 9000, api_keys: [k1, k2]}
)",
                                   "t");
  EXPECT_EQ(c.model.path, "/m");
  EXPECT_EQ(c.model.chat_template, "llama3");
  EXPECT_EQ(c.backend.kind, "cpu");
  EXPECT_EQ(c.scheduler.max_num_seqs, 8);
  EXPECT_FALSE(c.scheduler.chunked_prefill);
  EXPECT_EQ(c.cache.kv_bytes, 8ull << 30);
  EXPECT_DOUBLE_EQ(c.cache.kv_fraction, 0.5);
  EXPECT_TRUE(c.sparsity.enabled);
  EXPECT_EQ(c.sparsity.policy, Policy::kSnapKv);
  EXPECT_EQ(c.sparsity.capacity, 128);
  EXPECT_EQ(c.sparsity.pool, PoolKind::kAvg);
  EXPECT_EQ(c.server.port, 9000);
  EXPECT_EQ(c.server.api_keys.size(), 2u);
}

TEST(Config, DefaultsHaveSparsityOff) {
  const auto c = parse_config_yaml("model: {path: x}", "t");
  EXPECT_FALSE(c.sparsity.enabled);
  EXPECT_EQ(c.server.host, "127.0.0.1");
}

TEST(Config, DeviceTablesDefaultOnAndParsed) {
  EXPECT_TRUE(parse_config_yaml("model: {path: x}", "t").backend.device_tables);
  EXPECT_FALSE(parse_config_yaml("backend: {device_tables: false}", "t").backend.device_tables);
  EXPECT_NE(error_of("backend: {device_tables: 2}").find("backend.device_tables"),
            std::string::npos);
}

TEST(Config, SparseGraphsDefaultOnAndParsed) {
  EXPECT_TRUE(parse_config_yaml("model: {path: x}", "t").backend.sparse_graphs);
  EXPECT_FALSE(parse_config_yaml("backend: {sparse_graphs: false}", "t").backend.sparse_graphs);
  EXPECT_NE(error_of("backend: {sparse_graphs: maybe}").find("backend.sparse_graphs"),
            std::string::npos);
}

TEST(Config, QuantizationDefaultsToNoneParsesFp8AndRejectsTheRest) {
  EXPECT_EQ(parse_config_yaml("model: {path: x}", "t").model.quantization, Quantization::kNone);
  EXPECT_EQ(parse_config_yaml("model: {quantization: none}", "t").model.quantization,
            Quantization::kNone);
  EXPECT_EQ(parse_config_yaml("model: {quantization: fp8}", "t").model.quantization,
            Quantization::kFp8);
  EXPECT_NE(error_of("model: {quantization: int4}")
                .find("model.quantization: got 'int4' (allowed: none, fp8)"),
            std::string::npos);
  Config c;
  c.set("model.quantization", "fp8");
  EXPECT_EQ(c.model.quantization, Quantization::kFp8);
  EXPECT_THROW(c.set("model.quantization", "fp4"), ConfigError);
  EXPECT_EQ(c.model.quantization, Quantization::kFp8);
  c.set("model.quantization", "none");
  EXPECT_EQ(c.model.quantization, Quantization::kNone);
}

// The prefix cache's budget: the smaller of the pool fraction and the byte cap, in pages.
TEST(Config, PrefixCacheBudgetIsTheSmallerOfFractionAndBytes) {
  const Config d = parse_config_yaml("model: {path: x}", "t");
  EXPECT_EQ(d.cache.prefix_cache_bytes, 0u);
  EXPECT_EQ(d.cache.prefix_cache_pages(1000, 4096), 1000);  // whole pool, no byte cap
  const Config c =
      parse_config_yaml("cache: {prefix_cache_fraction: 0.5, prefix_cache_bytes: 1MiB}", "t");
  EXPECT_EQ(c.cache.prefix_cache_bytes, 1u << 20);
  EXPECT_EQ(c.cache.prefix_cache_pages(1000, 4096), 256);    // 1 MiB / 4 KiB < 500
  EXPECT_EQ(c.cache.prefix_cache_pages(400, 4096), 200);     // half of 400 < 256
  EXPECT_EQ(c.cache.prefix_cache_pages(1000, 8u << 20), 0);  // a page larger than the cap
  Config s;
  s.set("cache.prefix_cache_bytes", "2GiB");
  EXPECT_EQ(s.cache.prefix_cache_bytes, 2ull << 30);
  EXPECT_THROW(s.set("cache.prefix_cache_bytes", "lots"), ConfigError);
  EXPECT_EQ(s.cache.prefix_cache_bytes, 2ull << 30);
}

TEST(Config, RejectsUnknownKeysNamingThemAndTheAllowedOnes) {
  EXPECT_NE(error_of("modle: {path: x}").find("modle: unknown key (allowed: model, backend"),
            std::string::npos);
  EXPECT_NE(error_of("scheduler: {max_seqs: 3}").find("scheduler.max_seqs: unknown key"),
            std::string::npos);
  EXPECT_NE(error_of("sparsity: {capcity: 3}").find("sparsity.capcity: unknown key"),
            std::string::npos);
}

TEST(Config, RejectsBadValuesNamingKeyAndAllowedValues) {
  EXPECT_NE(
      error_of("backend: {kind: tpu}").find("backend.kind: got 'tpu' (allowed: auto, cpu, cuda)"),
      std::string::npos);
  EXPECT_NE(error_of("scheduler: {max_num_seqs: -1}")
                .find("scheduler.max_num_seqs: must be in [1, 4096], got -1"),
            std::string::npos);
  EXPECT_NE(error_of("scheduler: {max_num_seqs: many}")
                .find("scheduler.max_num_seqs: must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("cache: {kv_bytes: 8 parsecs}").find("cache.kv_bytes: unknown unit 'parsecs'"),
            std::string::npos);
  EXPECT_NE(error_of("cache: {kv_fraction: 2}").find("cache.kv_fraction: must be in"),
            std::string::npos);
  EXPECT_NE(error_of("server: {port: 70000}").find("server.port: must be in [0, 65535]"),
            std::string::npos);
  EXPECT_NE(error_of("sparsity: {policy: lru}")
                .find("sparsity.policy: got 'lru' (allowed: window, snapkv, scored)"),
            std::string::npos);
  EXPECT_NE(
      error_of("sparsity: {pool: median}").find("sparsity.pool: got 'median' (allowed: max, avg)"),
      std::string::npos);
  EXPECT_NE(error_of("sparsity: {capacity: 20, window: 16, sinks: 4}")
                .find("sparsity.capacity: must be in [sinks + window + 1 = 21"),
            std::string::npos);
  EXPECT_NE(error_of("sparsity: {pool_kernel: 4}").find("sparsity.pool_kernel: must be odd"),
            std::string::npos);
  EXPECT_NE(error_of("model: [1, 2]").find("model: must be a mapping"), std::string::npos);
  EXPECT_NE(error_of("model: {path: x\n bad").find("invalid YAML"), std::string::npos);
  EXPECT_NE(error_of("scheduler: {max_num_seqs: 64, max_num_batched_tokens: 32}")
                .find("scheduler.max_num_batched_tokens: must be >= scheduler.max_num_seqs"),
            std::string::npos);
}

TEST(Config, QualityMonitorDefaultsParsesAndRefusesBadValuesClearly) {
  const Config d = parse_config_yaml("", "t");
  EXPECT_DOUBLE_EQ(d.quality_monitor.sample_rate, 0.01);  // small by default, on
  EXPECT_EQ(d.quality_monitor.alert_below, 0.0);          // no alert
  EXPECT_FALSE(d.quality_monitor.restore_on_alert);
  const Config c = parse_config_yaml(
      "quality_monitor: {sample_rate: 0.25, alert_below: 0.9, alert_min_samples: 5, "
      "restore_on_alert: true, max_pending: 4}",
      "t");
  EXPECT_DOUBLE_EQ(c.quality_monitor.sample_rate, 0.25);
  EXPECT_DOUBLE_EQ(c.quality_monitor.alert_below, 0.9);
  EXPECT_EQ(c.quality_monitor.alert_min_samples, 5);
  EXPECT_TRUE(c.quality_monitor.restore_on_alert);
  EXPECT_EQ(c.quality_monitor.max_pending, 4);

  for (const char* v : {"1.5", "-0.1", "nan", "often"})
    EXPECT_NE(error_of(std::string("quality_monitor: {sample_rate: ") + v + "}")
                  .find(std::string("quality_monitor.sample_rate: must be a share in [0, 1] (0: "
                                    "off), got ") +
                        v),
              std::string::npos)
        << v;
  EXPECT_NE(
      error_of("quality_monitor: {alert_below: 2}")
          .find("quality_monitor.alert_below: must be a share in [0, 1] (0: no alert), got 2"),
      std::string::npos);
  EXPECT_NE(error_of("quality_monitor: {alert_min_samples: 0}")
                .find("quality_monitor.alert_min_samples: must be in [1, 1000000], got 0"),
            std::string::npos);
  EXPECT_NE(error_of("quality_monitor: {max_pending: 0}")
                .find("quality_monitor.max_pending: must be in [1, 4096], got 0"),
            std::string::npos);
  EXPECT_NE(error_of("quality_monitor: {restore_on_alert: true}")
                .find("quality_monitor.restore_on_alert: needs quality_monitor.alert_below > 0"),
            std::string::npos);
  EXPECT_NE(error_of("quality_monitor: {rate: 0.1}")
                .find("quality_monitor.rate: unknown key (allowed: sample_rate, alert_below"),
            std::string::npos);
  // --set goes through the same checks and changes nothing on a bad value.
  Config s;
  s.set("quality_monitor.sample_rate", "0");
  EXPECT_EQ(s.quality_monitor.sample_rate, 0.0);
  try {
    s.set("quality_monitor.sample_rate", "1.01");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "quality_monitor.sample_rate");
  }
  EXPECT_EQ(s.quality_monitor.sample_rate, 0.0);
}

TEST(Config, SetOverridesOneKeyAndRejectsBadOnesWithoutChange) {
  auto c = parse_config_yaml("scheduler: {max_num_seqs: 8}", "t");
  c.set("scheduler.max_num_seqs", "16");
  EXPECT_EQ(c.scheduler.max_num_seqs, 16);
  c.set("sparsity.capacity", "256");
  EXPECT_TRUE(c.sparsity.enabled);
  EXPECT_EQ(c.sparsity.capacity, 256);
  EXPECT_THROW(c.set("scheduler.max_num_seqs", "zero"), ConfigError);
  EXPECT_EQ(c.scheduler.max_num_seqs, 16);
  EXPECT_THROW(c.set("nosuch", "1"), ConfigError);
  try {
    c.set("scheduler.nosuch", "1");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("scheduler.nosuch: unknown key"), std::string::npos);
  }
}

TEST(Config, SparsityFileReplacesTheProfile) {
  const std::string path =
      ::testing::TempDir() + "/profile.yaml" + "." + std::to_string(::getpid());
  std::ofstream(path) << "full_layers: 1\npolicy: window\ncapacity: 64\nwindow: 8\nsinks: 4\n";
  const auto p = load_sparsity_file(path);
  EXPECT_TRUE(p.enabled);
  EXPECT_EQ(p.policy, Policy::kWindow);
  EXPECT_EQ(p.full_layers, 1);
  std::ofstream(path) << "policy: window\ncapacity: 8\nwindow: 8\n";
  try {
    load_sparsity_file(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sparsity.capacity"), std::string::npos) << e.what();
  }
}

TEST(Config, SparsityRequestOverrideIsTheOperatorsRuleNotPartOfTheProfile) {
  Config c = parse_config_yaml("sparsity: {}\n", "t");
  EXPECT_EQ(c.sparsity_request_override, RequestOverride::kWithinLimits);  // the default
  c = parse_config_yaml("sparsity: {request_override: off}\n", "t");
  EXPECT_EQ(c.sparsity_request_override, RequestOverride::kOff);
  EXPECT_FALSE(c.sparsity.enabled);  // naming only the rule does not switch sparsity on
  c = parse_config_yaml("sparsity: {request_override: any, capacity: 256}\n", "t");
  EXPECT_EQ(c.sparsity_request_override, RequestOverride::kAny);
  EXPECT_TRUE(c.sparsity.enabled);
  EXPECT_EQ(c.sparsity.capacity, 256);
  c.set("sparsity.request_override", "off");
  EXPECT_EQ(c.sparsity_request_override, RequestOverride::kOff);
  EXPECT_THROW(parse_config_yaml("sparsity: {request_override: maybe}\n", "t"), ConfigError);
  c = parse_config_yaml("server: {write_timeout_s: 2, allowed_hosts: [strata.lan]}\n", "t");
  EXPECT_EQ(c.server.write_timeout_s, 2);
  EXPECT_EQ(c.server.allowed_hosts, std::vector<std::string>{"strata.lan"});
}

TEST(Config, RepoConfigsParse) {
  for (const char* f :
       {"tiny-cpu.yaml", "tiny-cuda.yaml", "llama3-8b.yaml", "llama3-70b-tp2.yaml"}) {
    const std::string path = std::string(STRATA_SOURCE_DIR) + "/configs/" + f;
    EXPECT_NO_THROW(load_config_file(path)) << path;
  }
  // Every serving-benchmark config; the fp8-KV ones are their bf16-KV twins with kv_dtype fp8
  // (sparse layers only in the *sparse* ones).
  int bench = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::string(STRATA_SOURCE_DIR) + "/configs/bench")) {
    if (e.path().extension() != ".yaml") continue;
    ++bench;
    Config c;
    EXPECT_NO_THROW(c = load_config_file(e.path().string())) << e.path();
    if (e.path().filename().string().find("kvfp8") != std::string::npos) {
      EXPECT_EQ(c.cache.kv_dtype, KvDtype::kFp8) << e.path();
      const bool sparse = e.path().filename().string().find("sparse") != std::string::npos;
      EXPECT_EQ(c.sparsity.enabled, sparse) << e.path();
    }
  }
  EXPECT_GE(bench, 9);
  for (const char* f : {"sparsity-default.yaml", "sparsity-tiny.yaml", "sparsity-pyramid.yaml"}) {
    const std::string path = std::string(STRATA_SOURCE_DIR) + "/configs/" + f;
    EXPECT_NO_THROW(load_sparsity_file(path)) << path;
  }
}

}  // namespace
}  // namespace strata
