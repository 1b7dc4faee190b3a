// Errors in each client's own shape: OpenAI's {"error": {message, type, param, code}} and
// Anthropic's {"type": "error", "error": {type, message}}.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "api/http_types.h"
#include "base/error.h"

namespace tern::api {

enum class ErrorFlavor { OpenAI, Anthropic };

// status: 400 invalid request, 401 authentication, 404 not found, 413 too large, 500 server, 503
// overloaded/shutting down.
HttpResponse error_response(ErrorFlavor flavor, int status, const std::string& message,
                            const std::string& param = "");
// The HTTP status for an engine error: its code when it carries one (429 busy, 503 stopping),
// else 400 (the request was at fault).
int status_for(const Error& error);
std::string error_json(ErrorFlavor flavor, int status, const std::string& message,
                       const std::string& param = "");

// Something the client got wrong in a request (a 400): the message and the field it is about
// (OpenAI's `param`; empty: the request as a whole).
struct RequestError {
  std::string message;
  std::string field;
};
HttpResponse error_response(ErrorFlavor flavor, const RequestError& error);

// A value or a RequestError: Result<T> that keeps the field the error names.
template <typename T>
class [[nodiscard]] RequestResult {
 public:
  RequestResult(T value) : state_(std::move(value)) {}             // NOLINT: implicit by design
  RequestResult(RequestError error) : state_(std::move(error)) {}  // NOLINT: implicit by design
  RequestResult(const Error& error, std::string field = "")        // NOLINT: implicit by design
      : state_(RequestError{error.message, std::move(field)}) {}

  bool ok() const { return std::holds_alternative<T>(state_); }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  T* operator->() { return &value(); }
  T& operator*() & { return value(); }
  const RequestError& error() const { return std::get<RequestError>(state_); }

 private:
  std::variant<T, RequestError> state_;
};

}  // namespace tern::api
