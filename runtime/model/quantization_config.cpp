// GCC 12 with -fsanitize=address at -O2 reports std::regex's internal std::function as maybe
// uninitialized (a false positive inside libstdc++'s <regex>, as in tests/api/dashboards_test.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "runtime/model/quantization_config.h"

#include <boost/json.hpp>
#include <regex>

#include "runtime/error.h"

namespace strata {
namespace json = boost::json;

namespace {

constexpr const char* kRoot = "quantization_config";

[[noreturn]] void fail(const std::string& src, const std::string& key, const std::string& why) {
  throw ModelError(src + ": " + key + ": " + why);
}

std::string type_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "a list";
    case json::kind::object:
      return "an object";
  }
  return "?";
}

const json::value* find(const json::object& o, const char* key) {
  const auto* v = o.if_contains(key);
  return v && !v->is_null() ? v : nullptr;
}

std::string get_string(const json::object& o, const char* key, const std::string& src,
                       const std::string& path, bool required) {
  const auto* v = find(o, key);
  if (!v) {
    if (required) fail(src, path + "." + key, "missing");
    return "";
  }
  if (!v->is_string()) fail(src, path + "." + key, "must be a string, got " + type_name(*v));
  return std::string(v->as_string());
}

// QuantizationArgs: num_bits, type, strategy, symmetric (default true), dynamic (default false;
// compressed-tensors also writes the string "local", which no accepted scheme uses).
QuantArgs parse_args(const json::value& v, const std::string& src, const std::string& path) {
  if (!v.is_object()) fail(src, path, "must be an object, got " + type_name(v));
  const auto& o = v.as_object();
  QuantArgs a;
  const auto* nb = find(o, "num_bits");
  if (!nb) fail(src, path + ".num_bits", "missing");
  if (!nb->is_int64()) fail(src, path + ".num_bits", "must be an integer, got " + type_name(*nb));
  a.num_bits = static_cast<int>(nb->as_int64());
  a.type = get_string(o, "type", src, path, false);
  if (a.type.empty()) a.type = "int";  // compressed-tensors' default
  a.strategy = get_string(o, "strategy", src, path, false);
  if (const auto* s = find(o, "symmetric")) {
    if (!s->is_bool()) fail(src, path + ".symmetric", "must be a boolean, got " + type_name(*s));
    a.symmetric = s->as_bool();
  }
  if (const auto* d = find(o, "dynamic")) {
    if (d->is_bool())
      a.dynamic = d->as_bool();
    else if (d->is_string())
      fail(src, path + ".dynamic",
           "'" + std::string(d->as_string()) + "' is not supported (supported: true, false)");
    else
      fail(src, path + ".dynamic", "must be a boolean, got " + type_name(*d));
  }
  return a;
}

// The FP8 e4m3 requirements shared by weights and activations.
void require_fp8(const QuantArgs& a, const std::string& src, const std::string& path) {
  if (a.num_bits != 8)
    fail(src, path + ".num_bits",
         std::to_string(a.num_bits) + " is not supported (supported: 8, e4m3 floats)");
  if (a.type != "float")
    fail(src, path + ".type", "'" + a.type + "' is not supported (supported: float, e4m3)");
  if (!a.symmetric)
    fail(src, path + ".symmetric", "false (asymmetric, zero points) is not supported");
}

WeightScales weight_scheme(const QuantArgs& a, const std::string& src, const std::string& path) {
  require_fp8(a, src, path);
  if (a.dynamic) fail(src, path + ".dynamic", "true is not supported for weights");
  if (a.strategy == "channel") return WeightScales::kChannel;
  if (a.strategy == "tensor") return WeightScales::kTensor;
  fail(src, path + ".strategy",
       "'" + a.strategy + "' is not supported for weights (supported: channel, tensor)");
}

ActivationScales activation_scheme(const json::value* v, const std::string& src,
                                   const std::string& path) {
  if (!v) return ActivationScales::kNone;
  const QuantArgs a = parse_args(*v, src, path);
  require_fp8(a, src, path);
  if (a.strategy == "token") {
    if (!a.dynamic)
      fail(src, path + ".dynamic",
           "false with strategy token (static per-token scales cannot be "
           "calibrated; supported: token dynamic, tensor static)");
    return ActivationScales::kDynamicToken;
  }
  if (a.strategy == "tensor") {
    if (a.dynamic)
      fail(src, path + ".dynamic",
           "true with strategy tensor is not supported (a dynamic per-tensor scale depends on "
           "the whole batch; supported: token dynamic, tensor static)");
    return ActivationScales::kStaticTensor;
  }
  fail(src, path + ".strategy",
       "'" + a.strategy + "' is not supported for input_activations (supported: token, tensor)");
}

}  // namespace

const char* to_string(WeightScales w) {
  return w == WeightScales::kChannel ? "channel" : "tensor";
}

const char* to_string(ActivationScales a) {
  switch (a) {
    case ActivationScales::kNone:
      return "none";
    case ActivationScales::kDynamicToken:
      return "dynamic-token";
    case ActivationScales::kStaticTensor:
      return "static-tensor";
  }
  return "?";
}

std::string CheckpointQuantization::summary() const {
  if (!prequantized) return "none";
  std::string s = "fp8 pre-quantized (" + quant_method + " " + format + "): weights per " +
                  (weights == WeightScales::kChannel ? "channel" : "tensor") + ", activations ";
  switch (activations) {
    case ActivationScales::kNone:
      s += "unquantized (weight-only)";
      break;
    case ActivationScales::kDynamicToken:
      s += "dynamic per token";
      break;
    case ActivationScales::kStaticTensor:
      s += "static per tensor";
      break;
  }
  return s;
}

CheckpointQuantization parse_quantization_config(const std::string& text, const std::string& src) {
  json::value root;
  try {
    root = json::parse(text);
  } catch (const std::exception& e) {
    throw ModelError(src + ": invalid JSON: " + e.what());
  }
  CheckpointQuantization q;
  if (!root.is_object()) throw ModelError(src + ": must hold a JSON object");
  const auto* qv = find(root.as_object(), kRoot);
  if (!qv) return q;
  if (!qv->is_object()) fail(src, kRoot, "must be an object, got " + type_name(*qv));
  const auto& o = qv->as_object();
  const std::string root_key = kRoot;

  q.quant_method = get_string(o, "quant_method", src, root_key, true);
  if (q.quant_method != "compressed-tensors")
    fail(src, root_key + ".quant_method",
         "'" + q.quant_method + "' is not supported (supported: compressed-tensors)");
  auto check_format = [&](const std::string& f, const std::string& key) {
    if (f != "float-quantized" && f != "naive-quantized")
      fail(src, key, "'" + f + "' is not supported (supported: float-quantized, naive-quantized)");
  };
  q.format = get_string(o, "format", src, root_key, true);
  check_format(q.format, root_key + ".format");

  const auto* groups = find(o, "config_groups");
  if (!groups) fail(src, root_key + ".config_groups", "missing");
  if (!groups->is_object() || groups->as_object().empty())
    fail(src, root_key + ".config_groups", "must be a non-empty object");
  std::string first;
  for (const auto& [name, gv] : groups->as_object()) {
    const std::string path = root_key + ".config_groups." + std::string(name);
    if (!gv.is_object()) fail(src, path, "must be an object, got " + type_name(gv));
    const auto& g = gv.as_object();
    if (const auto* t = find(g, "targets"); t && !t->is_array())
      fail(src, path + ".targets", "must be a list, got " + type_name(*t));
    if (find(g, "output_activations"))
      fail(src, path + ".output_activations", "is not supported (must be null)");
    if (const auto* f = find(g, "format")) {
      if (!f->is_string()) fail(src, path + ".format", "must be a string, got " + type_name(*f));
      check_format(std::string(f->as_string()), path + ".format");
    }
    const auto* wv = find(g, "weights");
    if (!wv) fail(src, path + ".weights", "missing (weights must be quantized)");
    const WeightScales w =
        weight_scheme(parse_args(*wv, src, path + ".weights"), src, path + ".weights");
    const ActivationScales a =
        activation_scheme(find(g, "input_activations"), src, path + ".input_activations");
    if (first.empty()) {
      first = path;
      q.weights = w;
      q.activations = a;
    } else if (w != q.weights || a != q.activations) {
      fail(src, path,
           std::string("weights ") + to_string(w) + ", activations " + to_string(a) +
               " differ from " + first + "'s (weights " + to_string(q.weights) + ", activations " +
               to_string(q.activations) + "): one scheme for every layer is supported");
    }
  }

  if (const auto* ig = find(o, "ignore")) {
    if (!ig->is_array()) fail(src, root_key + ".ignore", "must be a list, got " + type_name(*ig));
    for (const auto& e : ig->as_array()) {
      if (!e.is_string()) fail(src, root_key + ".ignore", "entries must be strings");
      const std::string entry(e.as_string());
      if (entry.rfind("re:", 0) == 0) {
        try {
          std::regex re(entry.substr(3));
        } catch (const std::regex_error& err) {
          fail(src, root_key + ".ignore", "bad pattern '" + entry + "': " + err.what());
        }
      }
      q.ignore.push_back(entry);
    }
  }
  if (const auto* kv = find(o, "kv_cache_scheme"))
    q.kv_cache_scheme = parse_args(*kv, src, root_key + ".kv_cache_scheme");
  q.prequantized = true;
  return q;
}

bool ignores_module(const CheckpointQuantization& q, const std::string& module) {
  for (const auto& e : q.ignore) {
    if (e == module) return true;
    if (e.rfind("re:", 0) == 0 &&
        std::regex_search(module, std::regex(e.substr(3)), std::regex_constants::match_continuous))
      return true;
  }
  return false;
}

}  // namespace strata
