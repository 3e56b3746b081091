//===- ApiError.cpp - An HTTP status with an OpenAI-style JSON error body -===//

#include "server/ApiError.h"

#include <nlohmann/json.hpp>

namespace spanc::server {

char ApiError::ID = 0;

ApiError::ApiError(int status, std::string message, std::string param)
    : httpStatus(status), text(std::move(message)),
      parameter(std::move(param)) {}

const char *ApiError::type() const {
  switch (httpStatus) {
  case 401:
    return "authentication_error";
  case 404:
    return "not_found_error";
  case 429:
    return "rate_limit_error";
  case 503:
    return "service_unavailable_error";
  default:
    return httpStatus >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char *ApiError::code() const {
  switch (httpStatus) {
  case 400:
    return "invalid_request";
  case 401:
    return "invalid_api_key";
  case 404:
    return "not_found";
  case 405:
    return "method_not_allowed";
  case 413:
    return "request_too_large";
  case 429:
    return "queue_full";
  case 503:
    return "shutting_down";
  default:
    return httpStatus >= 500 ? "internal_error" : "invalid_request";
  }
}

std::string ApiError::body() const {
  nlohmann::json error = {{"message", text},
                          {"type", type()},
                          {"param", parameter.empty()
                                        ? nlohmann::json()
                                        : nlohmann::json(parameter)},
                          {"code", code()}};
  // Replacement characters for invalid UTF-8 in echoed client text.
  return nlohmann::json({{"error", error}})
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void ApiError::log(llvm::raw_ostream &os) const {
  os << httpStatus << ": " << text;
}

std::error_code ApiError::convertToErrorCode() const {
  return llvm::inconvertibleErrorCode();
}

llvm::Error apiError(int status, std::string message, std::string param) {
  return llvm::make_error<ApiError>(status, std::move(message),
                                    std::move(param));
}

ApiError toApiError(llvm::Error error) {
  ApiError result(500, "");
  llvm::handleAllErrors(
      std::move(error), [&](const ApiError &api) { result = api; },
      [&](const llvm::ErrorInfoBase &other) {
        result = ApiError(500, other.message());
      });
  return result;
}

} // namespace spanc::server
