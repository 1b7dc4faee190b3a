#include "server/http_server.h"

#include <httplib.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>

namespace tern::server {
namespace {

api::HttpRequest to_api(const httplib::Request& req) {
  api::HttpRequest r;
  r.method = req.method;
  r.path = req.path;
  r.body = req.body;
  for (const auto& [name, value] : req.headers) {
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    r.headers[lower] = value;
  }
  return r;
}

void send(const api::HttpResponse& response, httplib::Response& res) {
  res.status = response.status;
  if (!response.stream) {
    res.set_content(response.body, response.content_type.c_str());
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto stream = response.stream;
  // The provider runs once and writes the whole stream; the sink reports a vanished client.
  res.set_chunked_content_provider(
      response.content_type, [stream](size_t, httplib::DataSink& sink) {
        stream([&sink](const std::string& bytes) {
          return sink.is_writable() && sink.write(bytes.data(), bytes.size());
        });
        sink.done();
        return true;
      });
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// "POST /v1/messages 200 streamed (57 events) 1.84 s": a streamed response is logged when its
// stream ends, with the number of writes it made.
void log_when_done(const api::HttpRequest& request, api::HttpResponse& response,
                   std::chrono::steady_clock::time_point start) {
  const std::string what = request.method + " " + request.path;
  if (!response.stream) {
    fmt::print(stderr, "{} {} {} bytes {:.2f} s\n", what, response.status, response.body.size(),
               seconds_since(start));
    return;
  }
  auto inner = response.stream;
  const int status = response.status;
  response.stream = [inner, what, status, start](const api::StreamWriter& write) {
    size_t events = 0;
    inner([&](const std::string& bytes) {
      ++events;
      return write(bytes);
    });
    fmt::print(stderr, "{} {} streamed ({} events) {:.2f} s\n", what, status, events,
               seconds_since(start));
  };
}

}  // namespace

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  const size_t threads = options_.threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(options_.max_body_bytes);
  // A client that sends half a request and stalls holds a connection thread only this long.
  server_->set_read_timeout(static_cast<time_t>(options_.read_timeout_seconds), 0);
  // Streams may pause between events while a long prompt is prefilled; the write side waits.
  server_->set_write_timeout(600, 0);
  server_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        auto r = api::error_response(api::ErrorFlavor::OpenAI, 500, "internal error");
        res.status = r.status;
        res.set_content(r.body, "application/json");
      });
  // Unknown routes get a JSON 404 instead of an empty body.
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const bool anthropic = req.path.find("messages") != std::string::npos;
    auto r = api::error_response(
        anthropic ? api::ErrorFlavor::Anthropic : api::ErrorFlavor::OpenAI, res.status,
        res.status == 404 ? "no route for " + req.method + " " + req.path
                          : "request failed with status " + std::to_string(res.status));
    res.set_content(r.body, "application/json");
  });
}

HttpServer::~HttpServer() {
  stop();
}

bool HttpServer::authorized(const api::HttpRequest& request) const {
  if (options_.api_key.empty()) return true;
  const std::string bearer = request.header("authorization");
  if (bearer == "Bearer " + options_.api_key) return true;
  return request.header("x-api-key") == options_.api_key;
}

void HttpServer::route(const std::string& method, const std::string& path, api::ErrorFlavor flavor,
                       Handler handler) {
  auto wrapped = [this, flavor, handler](const httplib::Request& req, httplib::Response& res) {
    api::HttpRequest r = to_api(req);
    if (!authorized(r)) {
      send(api::error_response(flavor, 401, "invalid or missing API key"), res);
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    api::HttpResponse response = handler(r);
    if (options_.log_requests) log_when_done(r, response, start);
    send(response, res);
  };
  if (method == "GET") {
    server_->Get(path, wrapped);
  } else if (method == "POST") {
    server_->Post(path, wrapped);
  }
}

void HttpServer::route_public(const std::string& path, Handler handler) {
  server_->Get(path, [handler](const httplib::Request& req, httplib::Response& res) {
    send(handler(to_api(req)), res);
  });
}

Result<void> HttpServer::bind() {
  if (options_.port == 0) {
    bound_port_ = server_->bind_to_any_port(options_.host);
    if (bound_port_ <= 0) return make_error("cannot listen on {}: no free port", options_.host);
    return {};
  }
  if (!server_->bind_to_port(options_.host, options_.port)) {
    return make_error("cannot listen on {}:{} (in use, or not an address of this machine)",
                      options_.host, options_.port);
  }
  bound_port_ = options_.port;
  return {};
}

void HttpServer::serve() {
  server_->listen_after_bind();
}

void HttpServer::stop() {
  if (server_ && server_->is_running()) server_->stop();
}

}  // namespace tern::server
