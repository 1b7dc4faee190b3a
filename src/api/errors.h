// Errors in each client's own shape: OpenAI's {"error": {message, type, param, code}} and
// Anthropic's {"type": "error", "error": {type, message}}.
#pragma once

#include <string>

#include "api/http_types.h"

namespace tern::api {

enum class ErrorFlavor { OpenAI, Anthropic };

// status: 400 invalid request, 401 authentication, 404 not found, 413 too large, 500 server, 503
// overloaded/shutting down.
HttpResponse error_response(ErrorFlavor flavor, int status, const std::string& message,
                            const std::string& param = "");
std::string error_json(ErrorFlavor flavor, int status, const std::string& message,
                       const std::string& param = "");

}  // namespace tern::api
