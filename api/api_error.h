// HTTP-facing errors: OpenAI's `{"error":{"message","type","param","code"}}` body plus the
// status. Every exception that reaches a handler becomes one of these (to_api_error), so
// nothing a client sends escapes the server as an unhandled exception.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace strata::api {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = {},
           std::string code = {})
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;   // invalid_request_error | authentication_error | not_found_error | ...
  std::string param;  // offending request field, "" when none
  std::string code;   // machine-readable reason ("context_length_exceeded", ...), "" when none
};

// 400 invalid_request_error naming `param`.
ApiError bad_request(const std::string& param, const std::string& message,
                     const std::string& code = {});

// 404 not_found_error model_not_found (param "model"): `shown` is the model asked for, as it
// may be echoed (clipped by the caller), `served` the served name.
ApiError model_not_found(const std::string& shown, const std::string& served);

// Maps InvalidRequest (400), ConfigError (400), Overloaded (429), ApiError (as is), anything
// else (500 internal_error) to an ApiError. Call from inside a catch block.
ApiError to_api_error(std::exception_ptr e);

// The JSON body: {"error":{"message":...,"type":...,"param":...|null,"code":...|null}}.
std::string error_json(const ApiError& e);

}  // namespace strata::api
