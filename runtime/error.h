// Typed errors shared by every layer. Configuration and invariant violations throw one of
// these with enough context (file, key, tensor) for a user to fix the cause.
#pragma once

#include <stdexcept>
#include <string>

namespace strata {

// Bad user-supplied configuration (YAML, flags, sparsity profile). `key` names the field.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string key, const std::string& message)
      : std::runtime_error(key.empty() ? message : key + ": " + message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// A model directory or checkpoint that cannot be used (missing file/tensor, bad header...).
class ModelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A request that is invalid (maps to HTTP 400 in api/).
class InvalidRequest : public std::runtime_error {
 public:
  InvalidRequest(std::string param, const std::string& message)
      : std::runtime_error(message), param_(std::move(param)) {}
  const std::string& param() const { return param_; }

 private:
  std::string param_;
};

// Broken internal invariant: a bug, never a user error.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

#define STRATA_CHECK(cond, msg)                                                        \
  do {                                                                                 \
    if (!(cond))                                                                       \
      throw ::strata::InternalError(std::string(__FILE__) + ":" +                      \
                                    std::to_string(__LINE__) + ": " + #cond + ": " + \
                                    (msg));                                            \
  } while (0)

}  // namespace strata
