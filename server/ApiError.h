//===- ApiError.h - An HTTP status with an OpenAI-style JSON error body ---===//
//
// What the server answers a request it cannot serve: a status and the body
// OpenAI, vLLM and llama.cpp send, {"error": {"message", "type", "param",
// "code"}}, so clients raise their usual exceptions. Carried through the
// request path as an llvm::Error.
//
//===----------------------------------------------------------------------===//
#ifndef SPANC_SERVER_APIERROR_H
#define SPANC_SERVER_APIERROR_H

#include "llvm/Support/Error.h"

#include <string>

namespace spanc::server {

class ApiError : public llvm::ErrorInfo<ApiError> {
public:
  static char ID;

  ApiError(int status, std::string message, std::string param = "");

  int status() const { return httpStatus; }
  const std::string &detail() const { return text; }
  const std::string &param() const { return parameter; }
  /// OpenAI's error type for the status ("invalid_request_error", ...).
  const char *type() const;
  /// A short machine-readable code ("model_not_found", ...).
  const char *code() const;
  /// The JSON body.
  std::string body() const;

  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;

private:
  int httpStatus;
  std::string text;
  std::string parameter;
};

/// An llvm::Error holding an ApiError.
llvm::Error apiError(int status, std::string message, std::string param = "");

/// The ApiError an error holds; any other error becomes a 500 with its
/// message.
ApiError toApiError(llvm::Error error);

} // namespace spanc::server

#endif // SPANC_SERVER_APIERROR_H
