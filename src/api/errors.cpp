#include "api/errors.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace tern::api {
namespace {

std::string openai_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 500:
      return "server_error";
    case 503:
      return "server_error";
    default:
      return "invalid_request_error";
  }
}

std::string anthropic_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 500:
      return "api_error";
    case 503:
      return "overloaded_error";
    default:
      return "invalid_request_error";
  }
}

}  // namespace

std::string sse_event(const std::string& data, const std::string& name) {
  if (name.empty()) return fmt::format("data: {}\n\n", data);
  return fmt::format("event: {}\ndata: {}\n\n", name, data);
}

std::string error_json(ErrorFlavor flavor, int status, const std::string& message,
                       const std::string& param) {
  nlohmann::json j;
  if (flavor == ErrorFlavor::OpenAI) {
    j["error"] = {{"message", message},
                  {"type", openai_type(status)},
                  {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                  {"code", nullptr}};
  } else {
    j["type"] = "error";
    j["error"] = {{"type", anthropic_type(status)}, {"message", message}};
  }
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int status_for(const Error& error) {
  return error.code >= 400 && error.code < 600 ? error.code : 400;
}

HttpResponse error_response(ErrorFlavor flavor, int status, const std::string& message,
                            const std::string& param) {
  HttpResponse r;
  r.status = status;
  r.body = error_json(flavor, status, message, param);
  return r;
}

HttpResponse error_response(ErrorFlavor flavor, const RequestError& error) {
  return error_response(flavor, 400, error.message, error.field);
}

}  // namespace tern::api
