#include "runtime/model/random_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "runtime/error.h"
#include "runtime/model/make_model.h"

namespace strata {
namespace {

TEST(RandomModel, NamesStartWithRandom) {
  EXPECT_TRUE(is_random_model("random:tiny"));
  EXPECT_TRUE(is_random_model("random:"));
  EXPECT_FALSE(is_random_model("models/tiny"));
  EXPECT_FALSE(is_random_model("randomtiny"));
  EXPECT_FALSE(is_random_model(""));
}

TEST(RandomModel, PresetShapesAndOverrides) {
  const ModelConfig tiny = random_model_config("random:tiny");
  const ModelConfig want = preset_config("tiny");
  EXPECT_EQ(tiny.num_hidden_layers, want.num_hidden_layers);
  EXPECT_EQ(tiny.hidden_size, want.hidden_size);
  EXPECT_EQ(tiny.num_attention_heads, want.num_attention_heads);
  EXPECT_EQ(tiny.num_key_value_heads, want.num_key_value_heads);
  EXPECT_EQ(tiny.head_dim, want.head_dim);
  const ModelConfig c = random_model_config("random:llama3-8b,layers=4,kv_heads=4,vocab=1000");
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.vocab_size, 1000);
  EXPECT_EQ(random_model_config("random:tiny,heads=8,kv_heads=2").gqa_ratio(), 4);
  const ModelConfig o = random_model_config(
      "random:small,layers=2,hidden=128,heads=2,kv_heads=1,intermediate=256,head_dim=64");
  EXPECT_EQ(o.num_hidden_layers, 2);
  EXPECT_EQ(o.hidden_size, 128);
  EXPECT_EQ(o.num_attention_heads, 2);
  EXPECT_EQ(o.num_key_value_heads, 1);
  EXPECT_EQ(o.intermediate_size, 256);
  EXPECT_EQ(o.head_dim, 64);
}

// The one vocabulary rule: a preset's own vocabulary, else the built-in tokenizer's, which is
// what `strata make-model` writes for that preset.
TEST(RandomModel, VocabularyIsThePresetsOrTheBuiltInTokenizers) {
  EXPECT_EQ(random_model_config("random:llama3-8b").vocab_size, 128256);
  EXPECT_EQ(random_model_config("random:llama3-70b").vocab_size, 128256);
  EXPECT_EQ(random_model_config("random:tiny").vocab_size, kBuiltinVocabSize);
  EXPECT_EQ(random_model_config("random:small").vocab_size, kBuiltinVocabSize);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("strata_random_model_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  EXPECT_EQ(write_builtin_tokenizer(dir.string()), kBuiltinVocabSize);
  MakeModelOptions o;
  o.out_dir = (dir / "tiny").string();
  o.preset = "tiny";
  o.layers = 1;
  EXPECT_EQ(make_model(o).vocab_size, random_model_config("random:tiny,layers=1").vocab_size);
  std::filesystem::remove_all(dir);
}

TEST(RandomModel, BadNamesAreConfigErrorsOnModelPath) {
  for (const char* bad :
       {"tiny", "random:nope", "random:", "random:tiny,layers", "random:tiny,colour=3",
        "random:tiny,layers=-1", "random:tiny,layers=0", "random:tiny,layers=x",
        "random:tiny,layers=4x", "random:tiny,heads=3", "random:tiny,", "random:tiny,,layers=2"}) {
    try {
      random_model_config(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.key(), "model.path") << bad;
    }
  }
}

}  // namespace
}  // namespace strata
