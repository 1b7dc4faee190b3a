// Errors in each client's own shape: OpenAI's {"error": {message, type, param, code}} and
// Anthropic's {"type": "error", "error": {type, message}}.
#pragma once

#include <string>

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

}  // namespace tern::api
