#include "runtime/model/make_model.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "runtime/text/chat_template.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/progress.h"
#include "runtime/sampling_params.h"

namespace strata {
namespace json = boost::json;
namespace fs = std::filesystem;

namespace {

// Text the built-in tokenizer's merges are learned from (any text works: the merges are
// valid BPE for every input; this only decides which pieces become single tokens).
constexpr const char* kTrainingText = R"(
The quick brown fox jumps over the lazy dog. A model that keeps only the key and value
entries that matter can serve long prompts with far less memory. The first layers keep
their full cache; the later layers keep the tokens that the observation window attends
to, plus the sinks at the start and a window of the most recent tokens. This is the
story of a small server that wanted to be fast. It read the documentation, it measured
before it optimised, and it counted the bytes and the operations of every kernel.
Once upon a time there was a city by the sea where the people spoke many languages and
wrote programs in the evening. They asked questions and the answers came back one token
at a time. What is the capital of France? Paris is the capital of France. How many days
are in a week? There are seven days in a week. Thank you for your help, and have a nice
day! The number 12345 and the year 2026 and the value 3.14159 are written in digits.
int main(int argc, char** argv) { for (int i = 0; i < argc; ++i) printf("%s\n", argv[i]); return 0; }
def generate(prompt, max_tokens=16): return [token for token in model(prompt)][:max_tokens]
The user said hello, the assistant answered, and the system told them both to be kind.
)";

// GPT-2's byte <-> printable unicode mapping used by byte-level BPE.
std::vector<std::string> byte_to_unicode() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  }
  std::vector<std::string> out(256);
  for (std::size_t i = 0; i < bs.size(); ++i) {
    const int c = cs[i];
    std::string u;
    if (c < 0x80) {
      u.push_back(static_cast<char>(c));
    } else {
      u.push_back(static_cast<char>(0xC0 | (c >> 6)));
      u.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
    out[static_cast<std::size_t>(bs[i])] = u;
  }
  return out;
}

// Rough pre-tokenization for training only: optional leading space + letters, digits (<=3),
// other runs. The real encoder uses the Llama-3 regex.
std::vector<std::string> rough_pretokens(const std::string& text) {
  std::vector<std::string> out;
  std::size_t i = 0;
  auto cls = [](unsigned char c) {
    if (std::isalpha(c) || c >= 0x80) return 0;
    if (std::isdigit(c)) return 1;
    if (std::isspace(c)) return 2;
    return 3;
  };
  while (i < text.size()) {
    std::size_t j = i;
    if (text[j] == ' ' && j + 1 < text.size() && cls(static_cast<unsigned char>(text[j + 1])) != 2) ++j;
    const int c = cls(static_cast<unsigned char>(text[j]));
    std::size_t k = j + 1;
    while (k < text.size() && cls(static_cast<unsigned char>(text[k])) == c && (c != 1 || k - j < 3)) ++k;
    out.push_back(text.substr(i, k - i));
    i = k;
  }
  return out;
}

constexpr int kBuiltinMerges = 768;
const char* kSpecials[] = {"<|begin_of_text|>",         "<|end_of_text|>",
                           "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                           "<|finetune_right_pad_id|>",   "<|reserved_special_token_2|>",
                           "<|start_header_id|>",         "<|end_header_id|>",
                           "<|eom_id|>",                  "<|eot_id|>",
                           "<|python_tag|>",              "<|reserved_special_token_3|>",
                           "<|reserved_special_token_4|>", "<|reserved_special_token_5|>",
                           "<|reserved_special_token_6|>", "<|reserved_special_token_7|>"};

constexpr const char* kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw ModelError(path + ": cannot write");
  f << text;
}

}  // namespace

int write_builtin_tokenizer(const std::string& dir) {
  const auto b2u = byte_to_unicode();
  // Words as symbol sequences, with counts.
  std::map<std::string, int> word_counts;
  for (const auto& w : rough_pretokens(kTrainingText)) ++word_counts[w];
  std::vector<std::pair<std::vector<std::string>, int>> words;
  for (const auto& [w, c] : word_counts) {
    std::vector<std::string> syms;
    for (unsigned char ch : w) syms.push_back(b2u[ch]);
    words.emplace_back(std::move(syms), c);
  }
  std::vector<std::string> vocab(b2u.begin(), b2u.end());
  std::vector<std::pair<std::string, std::string>> merges;
  for (int m = 0; m < kBuiltinMerges; ++m) {
    std::map<std::pair<std::string, std::string>, int> pairs;
    for (const auto& [syms, c] : words)
      for (std::size_t i = 0; i + 1 < syms.size(); ++i) pairs[{syms[i], syms[i + 1]}] += c;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;  // map order breaks ties deterministically
    const auto [a, b] = best->first;
    merges.push_back(best->first);
    vocab.push_back(a + b);
    for (auto& [syms, c] : words) {
      std::vector<std::string> out;
      for (std::size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == a && syms[i + 1] == b) {
          out.push_back(a + b);
          ++i;
        } else {
          out.push_back(syms[i]);
        }
      }
      syms = std::move(out);
    }
  }
  // Pad the base vocabulary to a round size with merges of whole-vocab pairs never used.
  json::object vocab_obj;
  for (std::size_t i = 0; i < vocab.size(); ++i) vocab_obj[vocab[i]] = i;
  const int base = static_cast<int>(vocab.size());
  json::array added;
  for (std::size_t i = 0; i < std::size(kSpecials); ++i) {
    added.push_back(json::object{{"id", base + static_cast<int>(i)},
                                 {"content", kSpecials[i]},
                                 {"single_word", false},
                                 {"lstrip", false},
                                 {"rstrip", false},
                                 {"normalized", false},
                                 {"special", true}});
  }
  json::array merges_arr;
  for (const auto& [a, b] : merges) merges_arr.push_back(json::string(a + " " + b));
  json::object tok{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       json::object{{"type", "Sequence"},
                    {"pretokenizers",
                     json::array{json::object{{"type", "Split"},
                                              {"pattern", json::object{{"Regex", kLlama3Regex}}},
                                              {"behavior", "Isolated"},
                                              {"invert", false}},
                                 json::object{{"type", "ByteLevel"},
                                              {"add_prefix_space", false},
                                              {"trim_offsets", true},
                                              {"use_regex", false}}}}}},
      {"post_processor", nullptr},
      {"decoder", json::object{{"type", "ByteLevel"},
                               {"add_prefix_space", true},
                               {"trim_offsets", true},
                               {"use_regex", true}}},
      {"model", json::object{{"type", "BPE"},
                             {"dropout", nullptr},
                             {"unk_token", nullptr},
                             {"continuing_subword_prefix", nullptr},
                             {"end_of_word_suffix", nullptr},
                             {"fuse_unk", false},
                             {"byte_fallback", false},
                             {"ignore_merges", true},
                             {"vocab", vocab_obj},
                             {"merges", merges_arr}}}};
  write_file(dir + "/tokenizer.json", json::serialize(tok));
  json::object tc{{"bos_token", kSpecials[0]},
                  {"eos_token", kSpecials[9]},
                  {"chat_template", builtin_chat_template("llama3")},
                  {"model_max_length", 131072},
                  {"clean_up_tokenization_spaces", true},
                  {"tokenizer_class", "PreTrainedTokenizerFast"}};
  write_file(dir + "/tokenizer_config.json", json::serialize(tc));
  return base + static_cast<int>(std::size(kSpecials));
}

ModelConfig preset_config(const std::string& preset) {
  ModelConfig c;
  c.rope_scaling = RopeScaling{"llama3", 8.0, 1.0, 4.0, 8192};
  if (preset == "tiny") {
    c.hidden_size = 256, c.intermediate_size = 512, c.num_hidden_layers = 6;
    c.num_attention_heads = 4, c.num_key_value_heads = 2, c.head_dim = 64;
    c.rope_theta = 500000, c.max_position_embeddings = 8192;
    c.rope_scaling.original_max_position_embeddings = 1024;
  } else if (preset == "small") {
    c.hidden_size = 512, c.intermediate_size = 1408, c.num_hidden_layers = 8;
    c.num_attention_heads = 8, c.num_key_value_heads = 2, c.head_dim = 64;
    c.rope_theta = 500000, c.max_position_embeddings = 16384;
    c.rope_scaling.original_max_position_embeddings = 2048;
  } else if (preset == "llama3-8b") {
    c.hidden_size = 4096, c.intermediate_size = 14336, c.num_hidden_layers = 32;
    c.num_attention_heads = 32, c.num_key_value_heads = 8, c.head_dim = 128;
    c.rope_theta = 500000, c.max_position_embeddings = 131072, c.vocab_size = 128256;
  } else if (preset == "llama3-70b") {
    c.hidden_size = 8192, c.intermediate_size = 28672, c.num_hidden_layers = 80;
    c.num_attention_heads = 64, c.num_key_value_heads = 8, c.head_dim = 128;
    c.rope_theta = 500000, c.max_position_embeddings = 131072, c.vocab_size = 128256;
  } else {
    throw ConfigError("preset", "unknown preset '" + preset +
                                    "' (allowed: tiny, small, llama3-8b, llama3-70b)");
  }
  c.rms_norm_eps = 1e-5;
  c.torch_dtype = "bfloat16";
  return c;
}

float random_weight(std::uint64_t seed, const std::string& name, std::uint64_t index, float scale) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a of the tensor name
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  const std::uint64_t r = splitmix64(splitmix64(seed ^ h) + index);
  // Sum of four 16-bit uniforms: mean 2, variance 4/12 -> scale to std `scale`.
  double s = 0;
  for (int i = 0; i < 4; ++i) s += static_cast<double>((r >> (16 * i)) & 0xffff) / 65536.0;
  return static_cast<float>((s - 2.0) * 1.7320508075688772 * scale);
}

ModelConfig make_model(const MakeModelOptions& o) {
  ModelConfig c = preset_config(o.preset);
  if (o.layers) c.num_hidden_layers = o.layers;
  if (o.hidden) c.hidden_size = o.hidden;
  if (o.heads) c.num_attention_heads = o.heads;
  if (o.kv_heads) c.num_key_value_heads = o.kv_heads;
  if (o.intermediate) c.intermediate_size = o.intermediate;
  if (o.head_dim) c.head_dim = o.head_dim;
  c.tie_word_embeddings = o.tie_embeddings;
  if (!o.llama3_rope) c.rope_scaling = RopeScaling{};
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw ConfigError("kv_heads", "must divide heads");
  fs::create_directories(o.out_dir);

  int vocab;
  if (!o.tokenizer_json.empty()) {
    fs::copy_file(o.tokenizer_json, o.out_dir + "/tokenizer.json", fs::copy_options::overwrite_existing);
    const auto cfg_src = fs::path(o.tokenizer_json).parent_path() / "tokenizer_config.json";
    if (fs::exists(cfg_src))
      fs::copy_file(cfg_src, o.out_dir + "/tokenizer_config.json", fs::copy_options::overwrite_existing);
    // vocab = highest id + 1 over the model vocab and added tokens
    const auto tj = json::parse(read_text_file(o.tokenizer_json));
    std::int64_t mx = -1;
    for (const auto& [k, v] : tj.at("model").at("vocab").as_object()) mx = std::max(mx, v.to_number<std::int64_t>());
    for (const auto& t : tj.at("added_tokens").as_array()) mx = std::max(mx, t.at("id").to_number<std::int64_t>());
    vocab = static_cast<int>(mx + 1);
    if (c.vocab_size) vocab = std::max(vocab, c.vocab_size);
    c.bos_token_ids = {128000};
    c.eos_token_ids = {128001, 128008, 128009};
  } else {
    vocab = write_builtin_tokenizer(o.out_dir);
    const int base = vocab - 16;
    c.bos_token_ids = {base + 0};
    c.eos_token_ids = {base + 1, base + 8, base + 9};  // end_of_text, eom, eot
  }
  c.vocab_size = vocab;
  write_file(o.out_dir + "/config.json", model_config_to_json(c));

  // Weights, deterministic in (seed, tensor name, element index).
  std::vector<TensorToWrite> ts;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, float scale, float offset) {
    const std::uint64_t seed = o.seed;
    ts.push_back({name, shape, [seed, name, scale, offset](std::size_t b, std::size_t n, float* out) {
                    for (std::size_t i = 0; i < n; ++i)
                      out[i] = offset + random_weight(seed, name, b + i, scale);
                  }});
  };
  const std::int64_t h = c.hidden_size, in = c.intermediate_size;
  const float lin = 1.0f / std::sqrt(static_cast<float>(h));
  add("model.embed_tokens.weight", {vocab, h}, 1.0f, 0.0f);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {c.q_dim(), h}, lin, 0.0f);
    add(p + "self_attn.k_proj.weight", {c.kv_dim(), h}, lin, 0.0f);
    add(p + "self_attn.v_proj.weight", {c.kv_dim(), h}, lin, 0.0f);
    add(p + "self_attn.o_proj.weight", {h, c.q_dim()}, 1.0f / std::sqrt(static_cast<float>(c.q_dim())), 0.0f);
    add(p + "post_attention_layernorm.weight", {h}, 0.1f, 1.0f);
    add(p + "mlp.gate_proj.weight", {in, h}, lin, 0.0f);
    add(p + "mlp.up_proj.weight", {in, h}, lin, 0.0f);
    add(p + "mlp.down_proj.weight", {h, in}, 1.0f / std::sqrt(static_cast<float>(in)), 0.0f);
  }
  add("model.norm.weight", {h}, 0.1f, 1.0f);
  if (!c.tie_word_embeddings) add("lm_head.weight", {vocab, h}, lin, 0.0f);

  if (!o.shards) {
    write_safetensors(o.out_dir + "/model.safetensors", ts, o.dtype);
    fs::remove(o.out_dir + "/model.safetensors.index.json");
  } else {
    fs::remove(o.out_dir + "/model.safetensors");
    const std::size_t half = ts.size() / 2;
    std::vector<TensorToWrite> a(ts.begin(), ts.begin() + static_cast<std::ptrdiff_t>(half));
    std::vector<TensorToWrite> b(ts.begin() + static_cast<std::ptrdiff_t>(half), ts.end());
    const std::string fa = "model-00001-of-00002.safetensors", fb = "model-00002-of-00002.safetensors";
    write_safetensors(o.out_dir + "/" + fa, a, o.dtype);
    write_safetensors(o.out_dir + "/" + fb, b, o.dtype);
    json::object wm;
    for (const auto& t : a) wm[t.name] = fa;
    for (const auto& t : b) wm[t.name] = fb;
    write_file(o.out_dir + "/model.safetensors.index.json",
               json::serialize(json::object{{"metadata", json::object{}}, {"weight_map", wm}}));
  }
  return c;
}

}  // namespace strata
