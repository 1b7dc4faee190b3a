// HTTP/1.1 transport over cpp-httplib: routes (with and without the /v1 prefix where clients
// differ), API-key checks, streaming responses as server-sent events, and a clean stop.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/errors.h"
#include "api/http_types.h"
#include "base/error.h"

namespace httplib {
class Server;
}

namespace tern::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;  // empty: any key (or none) is accepted
  size_t threads = 32;  // concurrent connections
  size_t max_body_bytes = size_t{64} << 20;
  int read_timeout_seconds = 30;  // for a request's headers and body to arrive
  bool log_requests = false;      // one line per request on stderr: route, status, streamed, time
};

using Handler = std::function<api::HttpResponse(const api::HttpRequest&)>;

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();

  // flavor decides the shape of transport-level errors (401, 404, 413) on this route.
  void route(const std::string& method, const std::string& path, api::ErrorFlavor flavor,
             Handler handler);
  // A GET route served without an API key, for files that hold no secrets (the chat page).
  void route_public(const std::string& path, Handler handler);
  // Binds the port (port 0 picks a free one); errors name the address.
  Result<void> bind();
  int port() const { return bound_port_; }
  // Serves until stop() is called (from another thread or a signal watcher).
  void serve();
  void stop();

 private:
  bool authorized(const api::HttpRequest& request) const;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  int bound_port_ = 0;
};

}  // namespace tern::server
