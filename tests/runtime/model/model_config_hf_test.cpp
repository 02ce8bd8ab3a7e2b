// config.json compatibility with Hugging Face transformers 4.x (legacy rope keys) and 5.x
// (`rope_parameters`, strictly typed fields).
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "runtime/error.h"
#include "runtime/model/model_config.h"

namespace strata {
namespace {
namespace json = boost::json;

const char* kBase = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100)";

ModelConfig parse(const std::string& extra) {
  return parse_model_config(std::string("{") + kBase + (extra.empty() ? "" : ", " + extra) + "}",
                            "config.json");
}

TEST(ModelConfigHf, ReadsTransformers5RopeParameters) {
  // As transformers 5 saves a Llama-3.1 config: no top-level rope_theta / rope_scaling.
  const auto c = parse(R"("rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
      "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192})");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  const auto d = parse(R"("rope_parameters": {"rope_type": "default", "rope_theta": 1234.0})");
  EXPECT_EQ(d.rope_theta, 1234.0);
  EXPECT_EQ(d.rope_scaling.type, "");
  EXPECT_THROW(parse(R"("rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0})"), ModelError);
}

TEST(ModelConfigHf, LegacyKeysWinAsInTransformers) {
  const auto c =
      parse(R"("rope_theta": 10.0, "rope_scaling": {"rope_type": "linear", "factor": 2.0},
      "rope_parameters": {"rope_type": "default", "rope_theta": 99.0})");
  EXPECT_EQ(c.rope_theta, 10.0);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  // Null legacy scaling: rope_parameters decides the type.
  const auto d = parse(R"("rope_scaling": null, "rope_parameters": {"rope_type": "linear",
      "rope_theta": 99.0, "factor": 3.0})");
  EXPECT_EQ(d.rope_theta, 99.0);
  EXPECT_EQ(d.rope_scaling.type, "linear");
  EXPECT_EQ(d.rope_scaling.factor, 3.0);
}

TEST(ModelConfigHf, WritesBothSpellingsAndTypedIds) {
  ModelConfig c = parse("");
  c.head_dim = 16;
  c.rope_theta = 500000.0;
  c.rope_scaling = RopeScaling{"llama3", 8.0, 1.0, 4.0, 1024};
  c.bos_token_ids = {};
  c.eos_token_ids = {5, 6};
  const auto v = json::parse(model_config_to_json(c)).as_object();
  EXPECT_TRUE(v.at("bos_token_id").is_null());  // never [] (transformers 5: int | None)
  EXPECT_EQ(v.at("eos_token_id").as_array().size(), 2u);
  const auto& rp = v.at("rope_parameters").as_object();
  EXPECT_EQ(rp.at("rope_type").as_string(), "llama3");
  EXPECT_EQ(rp.at("rope_theta").as_double(), 500000.0);
  EXPECT_EQ(rp.at("original_max_position_embeddings").as_int64(), 1024);
  EXPECT_EQ(v.at("rope_scaling").as_object().at("factor").as_double(), 8.0);
  EXPECT_EQ(v.at("rope_theta").as_double(), 500000.0);
  // Round trip.
  const auto back = parse_model_config(model_config_to_json(c), "round-trip");
  EXPECT_EQ(back.rope_scaling.type, "llama3");
  EXPECT_EQ(back.rope_scaling.original_max_position_embeddings, 1024);
  EXPECT_EQ(back.rope_inv_freq(), c.rope_inv_freq());
  // No scaling: rope_scaling null, rope_parameters "default" with the theta.
  c.rope_scaling = RopeScaling{};
  const auto w = json::parse(model_config_to_json(c)).as_object();
  EXPECT_TRUE(w.at("rope_scaling").is_null());
  EXPECT_EQ(w.at("rope_parameters").as_object().at("rope_type").as_string(), "default");
  EXPECT_EQ(parse_model_config(model_config_to_json(c), "rt").rope_scaling.type, "");
}

}  // namespace
}  // namespace strata
