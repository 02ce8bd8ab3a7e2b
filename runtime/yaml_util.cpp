#include "runtime/yaml_util.h"

#include <cmath>
#include <limits>

#include "runtime/error.h"

namespace strata::yaml {

namespace {
std::string join(std::initializer_list<const char*> v) {
  std::string s;
  for (auto* x : v) s += (s.empty() ? "" : ", ") + std::string(x);
  return s;
}
}  // namespace

std::string key_path(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

void check_keys(const YAML::Node& map, const std::string& prefix,
                std::initializer_list<const char*> allowed) {
  if (!map.IsMap()) throw ConfigError(prefix, "must be a mapping");
  for (const auto& kv : map) {
    const auto k = kv.first.as<std::string>();
    bool ok = false;
    for (auto* a : allowed) ok = ok || k == a;
    if (!ok) throw ConfigError(key_path(prefix, k), "unknown key (allowed: " + join(allowed) + ")");
  }
}

bool read_bool(const YAML::Node& n, const std::string& key) {
  const auto s = n.IsScalar() ? n.Scalar() : std::string();
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  throw ConfigError(key, "must be true or false, got '" + s + "'");
}

std::int64_t read_int(const YAML::Node& n, const std::string& key, std::int64_t lo,
                      std::int64_t hi) {
  if (!n.IsScalar()) throw ConfigError(key, "must be an integer");
  std::int64_t v;
  try {
    std::size_t pos = 0;
    v = std::stoll(n.Scalar(), &pos);
    if (pos != n.Scalar().size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw ConfigError(key, "must be an integer, got '" + n.Scalar() + "'");
  }
  if (v < lo || v > hi)
    throw ConfigError(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "], got " + std::to_string(v));
  return v;
}

double read_double(const YAML::Node& n, const std::string& key, double lo, double hi) {
  if (!n.IsScalar()) throw ConfigError(key, "must be a number");
  double v;
  try {
    std::size_t pos = 0;
    v = std::stod(n.Scalar(), &pos);
    if (pos != n.Scalar().size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw ConfigError(key, "must be a number, got '" + n.Scalar() + "'");
  }
  if (!(v >= lo && v <= hi))
    throw ConfigError(key, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                               "], got " + n.Scalar());
  return v;
}

std::string read_string(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) throw ConfigError(key, "must be a string");
  return n.Scalar();
}

std::string read_enum(const YAML::Node& n, const std::string& key,
                      std::initializer_list<const char*> allowed) {
  const auto s = n.IsScalar() ? n.Scalar() : std::string("<not a scalar>");
  for (auto* a : allowed)
    if (s == a) return s;
  throw ConfigError(key, "got '" + s + "' (allowed: " + join(allowed) + ")");
}

std::vector<std::int64_t> read_int_list(const YAML::Node& n, const std::string& key,
                                        std::int64_t lo, std::int64_t hi) {
  if (!n.IsSequence()) throw ConfigError(key, "must be a list of integers");
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; i < n.size(); ++i)
    out.push_back(read_int(n[i], key + "[" + std::to_string(i) + "]", lo, hi));
  return out;
}

std::vector<std::string> read_string_list(const YAML::Node& n, const std::string& key) {
  if (n.IsScalar()) return {n.Scalar()};
  if (!n.IsSequence()) throw ConfigError(key, "must be a list of strings");
  std::vector<std::string> out;
  for (std::size_t i = 0; i < n.size(); ++i)
    out.push_back(read_string(n[i], key + "[" + std::to_string(i) + "]"));
  return out;
}

std::uint64_t parse_bytes(const std::string& s, const std::string& key) {
  std::size_t pos = 0;
  double v;
  try {
    v = std::stod(s, &pos);
  } catch (const std::exception&) {
    throw ConfigError(key, "must be a byte size like 8GiB, 512MiB or 1000000, got '" + s + "'");
  }
  std::string unit = s.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double mul;
  if (unit.empty() || unit == "B") mul = 1;
  else if (unit == "KiB") mul = 1024.0;
  else if (unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else if (unit == "KB") mul = 1e3;
  else if (unit == "MB") mul = 1e6;
  else if (unit == "GB") mul = 1e9;
  else throw ConfigError(key, "unknown unit '" + unit + "' (allowed: B, KiB, MiB, GiB, KB, MB, GB)");
  if (!(v >= 0) || v * mul > 1e18) throw ConfigError(key, "must be a non-negative size, got '" + s + "'");
  return static_cast<std::uint64_t>(std::llround(v * mul));
}

std::uint64_t read_bytes(const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) throw ConfigError(key, "must be a byte size");
  return parse_bytes(n.Scalar(), key);
}

}  // namespace strata::yaml
