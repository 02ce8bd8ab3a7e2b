// strata make-model: deterministic random Llama model directories.
#include <cstdio>

#include "runtime/error.h"
#include "runtime/model/make_model.h"
#include "runtime/model/model_loader.h"
#include "tools/cli/command.h"

namespace strata::cli {
namespace {

int run(int argc, char** argv) {
  Args a(argc, argv, {"help", "tie-embeddings", "no-llama3-rope", "shards"});
  if (a.flag("help")) {
    std::printf(
        "strata make-model --out DIR [--preset tiny|small|llama3-8b|llama3-70b] [--seed N]\n"
        "  [--dtype bf16|f32] [--tokenizer tokenizer.json] [--layers N] [--hidden N] [--heads N]\n"
        "  [--kv-heads N] [--intermediate N] [--head-dim N] [--tie-embeddings] [--no-llama3-rope]\n"
        "  [--shards]\n");
    return 0;
  }
  a.expect_only({"help", "tie-embeddings", "no-llama3-rope", "shards", "out", "preset", "seed",
                 "dtype", "tokenizer", "layers", "hidden", "heads", "kv-heads", "intermediate",
                 "head-dim"});
  MakeModelOptions o;
  o.out_dir = a.get_or("out", "");
  if (o.out_dir.empty()) throw ConfigError("--out", "required: the model directory to write");
  o.preset = a.get_or("preset", "tiny");
  o.seed = static_cast<std::uint64_t>(a.get_int("seed", 1));
  const auto dt = a.get_or("dtype", "bf16");
  if (dt == "bf16") o.dtype = DType::kBF16;
  else if (dt == "f32") o.dtype = DType::kF32;
  else throw ConfigError("--dtype", "got '" + dt + "' (allowed: bf16, f32)");
  o.tokenizer_json = a.get_or("tokenizer", "");
  o.layers = static_cast<int>(a.get_int("layers", 0));
  o.hidden = static_cast<int>(a.get_int("hidden", 0));
  o.heads = static_cast<int>(a.get_int("heads", 0));
  o.kv_heads = static_cast<int>(a.get_int("kv-heads", 0));
  o.intermediate = static_cast<int>(a.get_int("intermediate", 0));
  o.head_dim = static_cast<int>(a.get_int("head-dim", 0));
  o.tie_embeddings = a.flag("tie-embeddings");
  o.llama3_rope = !a.flag("no-llama3-rope");
  o.shards = a.flag("shards");
  const auto c = make_model(o);
  auto m = ModelWeights::load(o.out_dir);  // read back: what we wrote must load
  std::printf("wrote %s: %d layers, hidden %d, heads %d/%d, head_dim %d, vocab %d, %.2f M params, %.1f MB\n",
              o.out_dir.c_str(), c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
              c.num_key_value_heads, c.head_dim, c.vocab_size, static_cast<double>(c.num_params()) / 1e6,
              static_cast<double>(m->total_bytes()) / 1e6);
  return 0;
}

}  // namespace
STRATA_COMMAND("make-model", "write a deterministic random Llama model directory", run);
}  // namespace strata::cli
