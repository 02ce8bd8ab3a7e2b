#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"

namespace strata {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/strata_loader_" + name;
  fs::remove_all(d);
  return d;
}

std::string load_error(const std::string& dir) {
  try {
    ModelWeights::load(dir);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

TEST(ModelLoader, TinyPresetRoundTrips) {
  MakeModelOptions o;
  o.out_dir = fresh_dir("tiny");
  const auto c = make_model(o);
  auto m = ModelWeights::load(o.out_dir);
  EXPECT_EQ(m->config().num_hidden_layers, c.num_hidden_layers);
  EXPECT_EQ(m->config().vocab_size, c.vocab_size);
  EXPECT_EQ(m->config().rope_scaling.type, "llama3");
  EXPECT_EQ(m->config().eos_token_ids.size(), 3u);
  EXPECT_EQ(m->embed().dtype, DType::kBF16);
  // Values are the deterministic generator's, rounded to bf16.
  const auto q = m->layer(2).q->to_float();
  const float expect = random_weight(1, "model.layers.2.self_attn.q_proj.weight", 17, 1.0f / 16.0f);
  EXPECT_NEAR(q[17], expect, std::abs(expect) * 1e-2 + 1e-6);
  EXPECT_NE(&m->lm_head(), &m->embed());
  EXPECT_TRUE(fs::exists(m->tokenizer_json()));
}

TEST(ModelLoader, ShardedTiedFp32) {
  MakeModelOptions o;
  o.out_dir = fresh_dir("sharded");
  o.shards = true;
  o.tie_embeddings = true;
  o.dtype = DType::kF32;
  o.layers = 2;
  make_model(o);
  auto m = ModelWeights::load(o.out_dir);
  EXPECT_TRUE(m->config().tie_word_embeddings);
  EXPECT_EQ(&m->lm_head(), &m->embed());
  EXPECT_EQ(m->layer(1).down->dtype, DType::kF32);
  const auto a = m->layer(1).down->to_float();
  EXPECT_EQ(a[5], random_weight(1, "model.layers.1.mlp.down_proj.weight", 5, 1.0f / std::sqrt(512.0f)));
}

TEST(ModelLoader, DeterministicInSeed) {
  MakeModelOptions o;
  o.layers = 1;
  o.out_dir = fresh_dir("s1");
  make_model(o);
  o.out_dir = fresh_dir("s2");
  make_model(o);
  o.seed = 2;
  o.out_dir = fresh_dir("s3");
  make_model(o);
  auto read = [](const std::string& d) {
    std::ifstream f(d + "/model.safetensors", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const auto t = ::testing::TempDir();
  EXPECT_EQ(read(t + "/strata_loader_s1"), read(t + "/strata_loader_s2"));
  EXPECT_NE(read(t + "/strata_loader_s1"), read(t + "/strata_loader_s3"));
}

class LoaderErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fresh_dir(std::string("err_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    MakeModelOptions o;
    o.out_dir = dir_;
    o.layers = 2;
    make_model(o);
  }
  std::string dir_;
};

TEST_F(LoaderErrors, NotADirectory) {
  EXPECT_NE(load_error(dir_ + "/nope").find("not a model directory"), std::string::npos);
}

TEST_F(LoaderErrors, MissingConfig) {
  fs::remove(dir_ + "/config.json");
  EXPECT_NE(load_error(dir_).find("config.json: missing"), std::string::npos);
}

TEST_F(LoaderErrors, ConfigMissingKeyAndBadValues) {
  write(dir_ + "/config.json", R"({"hidden_size": 256, "intermediate_size": 512})");
  EXPECT_NE(load_error(dir_).find("config.json: num_hidden_layers: missing required key"), std::string::npos);
  write(dir_ + "/config.json",
        R"({"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 3, "vocab_size": 10})");
  EXPECT_NE(load_error(dir_).find("num_key_value_heads: must divide num_attention_heads"), std::string::npos);
  write(dir_ + "/config.json", R"({"hidden_size": "big"})");
  EXPECT_NE(load_error(dir_).find("hidden_size: must be an integer"), std::string::npos);
  write(dir_ + "/config.json", "{not json");
  EXPECT_NE(load_error(dir_).find("config.json: invalid JSON"), std::string::npos);
  write(dir_ + "/config.json",
        R"({"architectures": ["MistralForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
            "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10})");
  EXPECT_NE(load_error(dir_).find("unsupported architecture 'MistralForCausalLM'"), std::string::npos);
  write(dir_ + "/config.json",
        R"({"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
            "vocab_size": 10, "rope_scaling": {"rope_type": "yarn", "factor": 4}})");
  EXPECT_NE(load_error(dir_).find("rope_scaling.rope_type: unsupported 'yarn'"), std::string::npos);
}

TEST_F(LoaderErrors, NoWeights) {
  fs::remove(dir_ + "/model.safetensors");
  EXPECT_NE(load_error(dir_).find("no model.safetensors or model.safetensors.index.json"), std::string::npos);
}

TEST_F(LoaderErrors, MissingTensorNamed) {
  // Rewrite the config with 3 layers: layer 2's tensors are missing.
  auto cfg = read_text_file(dir_ + "/config.json");
  const auto pos = cfg.find("\"num_hidden_layers\":2");
  ASSERT_NE(pos, std::string::npos);
  cfg.replace(pos, 21, "\"num_hidden_layers\":3");
  write(dir_ + "/config.json", cfg);
  EXPECT_NE(load_error(dir_).find("missing tensor 'model.layers.2.input_layernorm.weight'"), std::string::npos);
}

TEST_F(LoaderErrors, WrongShapeNamed) {
  auto cfg = read_text_file(dir_ + "/config.json");
  const auto pos = cfg.find("\"intermediate_size\":512");
  ASSERT_NE(pos, std::string::npos);
  cfg.replace(pos, 23, "\"intermediate_size\":256");
  write(dir_ + "/config.json", cfg);
  const auto e = load_error(dir_);
  EXPECT_NE(e.find("model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has shape [512, 256], expected [256, 256]"),
            std::string::npos)
      << e;
}

TEST_F(LoaderErrors, TruncatedFile) {
  const auto p = dir_ + "/model.safetensors";
  fs::resize_file(p, fs::file_size(p) - 1000);
  const auto e = load_error(dir_);
  EXPECT_NE(e.find("model.safetensors: tensor '"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated file"), std::string::npos) << e;
  fs::resize_file(p, 5);
  EXPECT_NE(load_error(dir_).find("truncated file (5 bytes"), std::string::npos);
}

TEST_F(LoaderErrors, BadHeader) {
  const auto p = dir_ + "/model.safetensors";
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    const std::uint64_t huge = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&huge), 8);
  }
  EXPECT_NE(load_error(dir_).find("bad header length"), std::string::npos);
  {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    const std::uint64_t len = 16;
    f.write(reinterpret_cast<const char*>(&len), 8);
    f.write("{\"a\": nonsense  ", 16);
  }
  EXPECT_NE(load_error(dir_).find("bad header: invalid JSON"), std::string::npos);
}

TEST_F(LoaderErrors, UnsupportedDtype) {
  const auto p = dir_ + "/model.safetensors";
  std::string bytes = read_text_file(p);
  const auto pos = bytes.find("\"BF16\"");
  ASSERT_NE(pos, std::string::npos);
  bytes.replace(pos, 6, "\"I8\"  ");
  write(p, bytes);
  EXPECT_NE(load_error(dir_).find("unsupported dtype I8"), std::string::npos);
}

TEST_F(LoaderErrors, MissingShard) {
  MakeModelOptions o;
  o.out_dir = fresh_dir("shard_err");
  o.layers = 1;
  o.shards = true;
  make_model(o);
  fs::remove(o.out_dir + "/model-00002-of-00002.safetensors");
  EXPECT_NE(load_error(o.out_dir).find("model-00002-of-00002.safetensors: missing shard"), std::string::npos);
  write(o.out_dir + "/model.safetensors.index.json", R"({"metadata": {}})");
  EXPECT_NE(load_error(o.out_dir).find("missing 'weight_map'"), std::string::npos);
}

}  // namespace
}  // namespace strata
