// Strict YAML readers: a wrong type or an unknown key is a ConfigError naming the key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace strata::yaml {

void check_keys(const YAML::Node& map, const std::string& prefix,
                std::initializer_list<const char*> allowed);
std::string key_path(const std::string& prefix, const std::string& key);

bool read_bool(const YAML::Node& n, const std::string& key);
std::int64_t read_int(const YAML::Node& n, const std::string& key, std::int64_t lo, std::int64_t hi);
double read_double(const YAML::Node& n, const std::string& key, double lo, double hi);
std::string read_string(const YAML::Node& n, const std::string& key);
std::string read_enum(const YAML::Node& n, const std::string& key,
                      std::initializer_list<const char*> allowed);
std::vector<std::int64_t> read_int_list(const YAML::Node& n, const std::string& key,
                                        std::int64_t lo, std::int64_t hi);
std::vector<std::string> read_string_list(const YAML::Node& n, const std::string& key);
// Byte sizes: integers or strings like "8GiB", "512MiB", "2GB".
std::uint64_t read_bytes(const YAML::Node& n, const std::string& key);
std::uint64_t parse_bytes(const std::string& s, const std::string& key);

}  // namespace strata::yaml
