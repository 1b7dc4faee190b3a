// The API surface over one engine: one handler per endpoint of the OpenAI, Anthropic and
// Responses APIs (server/routes.cpp maps paths to them). Holds what they share.
#pragma once

#include <memory>
#include <string>

#include "api/http_types.h"
#include "engine/engine.h"

namespace tern::api {

struct ServiceInfo {
  std::string model_name;  // what /v1/models lists and responses report
  int64_t created = 0;     // unix time the server started
};

class Service {
 public:
  Service(Engine& engine, ServiceInfo info) : engine_(engine), info_(std::move(info)) {}

  HttpResponse models(const HttpRequest& request);
  HttpResponse completions(const HttpRequest& request);
  HttpResponse health(const HttpRequest& request);
  HttpResponse metrics(const HttpRequest& request);

  Engine& engine() { return engine_; }
  const ServiceInfo& info() const { return info_; }

 private:
  Engine& engine_;
  ServiceInfo info_;
};

}  // namespace tern::api
