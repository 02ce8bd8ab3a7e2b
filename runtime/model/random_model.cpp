#include "runtime/model/random_model.h"

#include <charconv>
#include <vector>

#include "runtime/error.h"
#include "runtime/model/make_model.h"

namespace strata {
namespace {

constexpr std::string_view kPrefix = "random:";

int positive(std::string_view item, std::string_view value) {
  int v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc{} || end != value.data() + value.size())
    throw ConfigError("model.path", "bad number in '" + std::string(item) + "'");
  if (v <= 0)
    throw ConfigError("model.path", "value must be positive in '" + std::string(item) + "'");
  return v;
}

}  // namespace

bool is_random_model(std::string_view path) {
  return path.substr(0, kPrefix.size()) == kPrefix;
}

ModelConfig random_model_config(const std::string& spec) {
  if (!is_random_model(spec)) throw ConfigError("model.path", "not a random model spec: " + spec);
  // "<preset>,key=value,...": items split at every comma (an empty item is an error).
  const std::string_view body = std::string_view(spec).substr(kPrefix.size());
  std::vector<std::string_view> items;
  for (std::size_t from = 0;;) {
    const auto comma = body.find(',', from);
    items.push_back(body.substr(from, comma - from));
    if (comma == std::string_view::npos) break;
    from = comma + 1;
  }
  ModelConfig c;
  try {
    c = preset_config(std::string(items[0]));
  } catch (const ConfigError& e) {
    throw ConfigError("model.path", std::string(e.what()) + " in '" + spec + "'");
  }
  if (c.vocab_size == 0) c.vocab_size = kBuiltinVocabSize;
  for (std::size_t i = 1; i < items.size(); ++i) {
    const std::string_view item = items[i];
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      throw ConfigError("model.path", "expected key=value in '" + std::string(item) + "'");
    const std::string_view k = item.substr(0, eq);
    const int v = positive(item, item.substr(eq + 1));
    if (k == "layers")
      c.num_hidden_layers = v;
    else if (k == "hidden")
      c.hidden_size = v;
    else if (k == "heads")
      c.num_attention_heads = v;
    else if (k == "kv_heads")
      c.num_key_value_heads = v;
    else if (k == "intermediate")
      c.intermediate_size = v;
    else if (k == "head_dim")
      c.head_dim = v;
    else if (k == "vocab")
      c.vocab_size = v;
    else
      throw ConfigError("model.path",
                        "unknown key '" + std::string(k) +
                            "' (allowed: layers, hidden, heads, kv_heads, intermediate, head_dim, "
                            "vocab)");
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw ConfigError("model.path", "kv_heads must divide heads in '" + spec + "'");
  return c;
}

}  // namespace strata
