// strata logits: teacher-forced logits of a token sequence on the CPU reference backend,
// written as a NumPy .npy file (fp32 little-endian, shape [n, vocab]) for
// tools/hf/compare_logits.py and other offline checks (docs/validation.md).
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/error.h"
#include "runtime/model/model_loader.h"
#include "runtime/sparsity_profile.h"
#include "runtime/teacher_forcing.h"
#include "tools/cli/command.h"

namespace strata::cli {
namespace {

// Integers separated by anything that is not part of a number: "1,2,3", "1 2\n3", "[1, 2]".
std::vector<std::int32_t> parse_ids(const std::string& text, const std::string& what) {
  std::vector<std::int32_t> ids;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if ((c >= '0' && c <= '9') || c == '-') {
      std::size_t end = i + 1;
      while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
      const std::string tok = text.substr(i, end - i);
      long long v = 0;
      try {
        v = std::stoll(tok);
      } catch (const std::exception&) {
        throw ConfigError(what, "bad token id '" + tok + "'");
      }
      if (v < 0 || v > 0x7fffffff) throw ConfigError(what, "token id " + tok + " out of range");
      ids.push_back(static_cast<std::int32_t>(v));
      i = end;
    } else if (c == ',' || c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '[' ||
               c == ']') {
      ++i;
    } else {
      throw ConfigError(what, std::string("unexpected character '") + c + "' in the id list");
    }
  }
  if (ids.empty()) throw ConfigError(what, "no token ids");
  return ids;
}

// A profile file (bare, or a config with a `sparsity:` section); enabled unless it says
// `enabled: false`.
SparsityProfile read_profile(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    throw ConfigError("--sparsity", path + ": " + e.what());
  }
  const YAML::Node node = root.IsMap() && root["sparsity"] ? root["sparsity"] : root;
  SparsityProfile base;
  base.enabled = true;
  try {
    return parse_sparsity_yaml(node, base);
  } catch (const ConfigError& e) {
    throw ConfigError(e.key(), path + ": " + e.what());
  }
}

// NumPy format 1.0: magic, header length, a Python dict literal padded so the data starts
// at a multiple of 64 bytes, then the raw array.
void write_npy(const std::string& path, const std::vector<float>& data, std::size_t rows,
               std::size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  const std::size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream f(path, std::ios::binary);
  if (!f) throw ConfigError("--out", "cannot write '" + path + "'");
  f.write("\x93NUMPY\x01\x00", 8);
  const auto len = static_cast<std::uint16_t>(header.size());
  const char le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  f.write(le, 2);
  f.write(header.data(), static_cast<std::streamsize>(header.size()));
  static_assert(sizeof(float) == 4);
  f.write(reinterpret_cast<const char*>(data.data()),
          static_cast<std::streamsize>(data.size() * sizeof(float)));
  if (!f) throw ConfigError("--out", "write to '" + path + "' failed");
}

int run(int argc, char** argv) {
  Args a(argc, argv, {"help"});
  if (a.flag("help")) {
    std::printf(
        "strata logits --model DIR (--ids 1,2,3 | --ids-file FILE) [--out FILE.npy]\n"
        "  [--sparsity PROFILE.yaml] [--prefill N] [--threads N] [--quantization none|fp8]\n"
        "Teacher-forced logits on the CPU reference backend: one prefill over the ids (or a\n"
        "prefill of the first N ids then one decode step per remaining id), fp32 logits\n"
        "[n][vocab] written as .npy. Without --out, prints each position's argmax.\n"
        "--quantization fp8: the linear layers in e4m3, W8A8 (docs/cpu-backend.md \"FP8\").\n"
        "A pre-quantized checkpoint (compressed-tensors FP8, docs/checkpoints.md) runs with its\n"
        "own codes and scales whatever --quantization says. The JSON line names the backend\n"
        "(\"backend\": cpu, cpu-fp8, cpu-fp8-weight-only) and the checkpoint's quantization.\n");
    return 0;
  }
  a.expect_only({"help", "model", "ids", "ids-file", "out", "sparsity", "prefill", "threads",
                 "quantization"});
  const auto quant = a.get_or("quantization", "none");
  if (quant != "none" && quant != "fp8")
    throw ConfigError("--quantization", "got '" + quant + "' (allowed: none, fp8)");
  const auto dir = a.get_or("model", "");
  if (dir.empty()) throw ConfigError("--model", "required: the model directory");
  std::vector<std::int32_t> ids;
  if (a.get("ids") && a.get("ids-file"))
    throw ConfigError("--ids", "give either --ids or --ids-file, not both");
  if (auto s = a.get("ids")) {
    ids = parse_ids(*s, "--ids");
  } else if (auto f = a.get("ids-file")) {
    std::ifstream in(*f, std::ios::binary);
    if (!in) throw ConfigError("--ids-file", "cannot read '" + *f + "'");
    ids = parse_ids(std::string(std::istreambuf_iterator<char>(in), {}), "--ids-file");
  } else {
    throw ConfigError("--ids", "required: --ids 1,2,3 or --ids-file FILE");
  }
  SparsityProfile profile;
  if (auto s = a.get("sparsity")) profile = read_profile(*s);
  const int prefill = static_cast<int>(a.get_int("prefill", 0));
  const int threads = static_cast<int>(a.get_int("threads", 0));

  std::shared_ptr<const ModelWeights> weights = ModelWeights::load(dir);
  const ModelConfig mc = weights->config();  // a copy: the weights are dropped below
  const int pages = teacher_forcing_pages(mc, static_cast<int>(ids.size()), profile, prefill);
  const KvLayout layout{mc.num_key_value_heads, mc.head_dim, 4};
  CpuBackendOptions opts;
  opts.threads = threads;
  opts.quantization = quant == "fp8" ? Quantization::kFp8 : Quantization::kNone;
  opts.kv_bytes = static_cast<std::uint64_t>(pages) * layout.page_bytes();
  auto backend = make_cpu_backend(weights, opts);
  const std::string checkpoint_quant = weights->quantization().summary();
  weights.reset();

  const auto t0 = std::chrono::steady_clock::now();
  const auto logits = teacher_forced_logits(*backend, ids, profile, prefill);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto vocab = static_cast<std::size_t>(mc.vocab_size);

  if (auto out = a.get("out")) {
    write_npy(*out, logits, ids.size(), vocab);
    std::printf(
        "{\"out\": \"%s\", \"tokens\": %zu, \"vocab\": %zu, \"sparsity\": %s, \"prefill\": %d, "
        "\"seconds\": %.3f, \"backend\": \"%s\", \"checkpoint_quantization\": \"%s\"}\n",
        out->c_str(), ids.size(), vocab, profile.enabled ? "true" : "false",
        prefill == 0 ? static_cast<int>(ids.size()) : prefill, secs, backend->info().name.c_str(),
        checkpoint_quant.c_str());
  } else {
    std::printf("{\"tokens\": %zu, \"vocab\": %zu, \"seconds\": %.3f, \"argmax\": [", ids.size(),
                vocab, secs);
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const float* row = logits.data() + t * vocab;
      std::size_t best = 0;
      for (std::size_t v = 1; v < vocab; ++v)
        if (row[v] > row[best]) best = v;
      std::printf("%s%zu", t ? ", " : "", best);
    }
    std::printf("]}\n");
  }
  return 0;
}

}  // namespace
STRATA_COMMAND("logits", "teacher-forced logits of a token sequence (CPU backend, .npy)", run);
}  // namespace strata::cli
