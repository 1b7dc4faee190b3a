// The boundary between transport (server/) and protocol (api/): a parsed HTTP request and a
// response that is either a body or a stream of server-sent events written as they happen.
#pragma once

#include <functional>
#include <map>
#include <string>

namespace tern::api {

struct HttpRequest {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;

  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

// Writes raw bytes to the client; false once the client has gone away.
using StreamWriter = std::function<bool(const std::string& bytes)>;

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // When set, the response is streamed: the function writes until done (or the writer fails).
  std::function<void(const StreamWriter& write)> stream;
};

// One server-sent event: "event: NAME\ndata: DATA\n\n" (no event line when NAME is empty).
std::string sse_event(const std::string& data, const std::string& name = "");

}  // namespace tern::api
