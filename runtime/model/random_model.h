// "random:" model names: deterministic random Llama weights that no checkpoint holds (the
// CUDA backend builds them on the device; benchmarks and tests take their shape). The one
// parser of these names; docs/runtime.md "random: models" states the rule.
#pragma once

#include <string>
#include <string_view>

#include "runtime/model/model_config.h"

namespace strata {

// Whether `path` (model.path, --model) names a random model: it starts with "random:".
bool is_random_model(std::string_view path);

// The model shape of "random:<preset>[,key=value...]". <preset> is one of make_model.h's
// presets (tiny, small, llama3-8b, llama3-70b); the keys layers, hidden, heads, kv_heads,
// intermediate, head_dim and vocab (positive integers; heads a multiple of kv_heads) override
// it. Vocabulary: the preset's own (llama3-*: 128,256), or for presets that fix none (tiny,
// small) the built-in tokenizer's, kBuiltinVocabSize (684): the shape `strata make-model
// --preset <p>` writes, so the built-in tokenizer fits; `vocab=N` overrides either.
// Throws ConfigError("model.path") naming what is wrong.
ModelConfig random_model_config(const std::string& spec);

}  // namespace strata
