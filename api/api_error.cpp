#include "api/api_error.h"

#include <boost/json.hpp>

#include "actors/request.h"
#include "runtime/error.h"

namespace strata::api {

namespace json = boost::json;

ApiError bad_request(const std::string& param, const std::string& message,
                     const std::string& code) {
  return ApiError(400, "invalid_request_error", message, param, code);
}

ApiError model_not_found(const std::string& shown, const std::string& served) {
  return ApiError(404, "not_found_error",
                  "the model '" + shown + "' does not exist (served: '" + served + "')", "model",
                  "model_not_found");
}

ApiError to_api_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const ApiError& x) {
    return x;
  } catch (const InvalidRequest& x) {
    const std::string msg = x.what();
    // The engine states the numbers; give it OpenAI's code so clients can branch on it.
    const bool ctx = msg.find("context") != std::string::npos;
    return bad_request(x.param(), msg, ctx ? "context_length_exceeded" : "");
  } catch (const ConfigError& x) {
    return bad_request(x.key(), x.what());
  } catch (const Overloaded& x) {
    return ApiError(429, "overloaded_error", x.what(), "", "overloaded");
  } catch (const std::bad_alloc&) {
    return ApiError(500, "internal_error", "out of memory");
  } catch (const std::exception& x) {
    return ApiError(500, "internal_error", std::string("internal error: ") + x.what());
  } catch (...) {
    return ApiError(500, "internal_error", "internal error");
  }
}

std::string error_json(const ApiError& e) {
  json::object err;
  err["message"] = e.what();
  err["type"] = e.type;
  err["param"] = e.param.empty() ? json::value(nullptr) : json::value(e.param);
  err["code"] = e.code.empty() ? json::value(nullptr) : json::value(e.code);
  json::object o;
  o["error"] = std::move(err);
  return json::serialize(o);
}

}  // namespace strata::api
