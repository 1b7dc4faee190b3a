// The API surface over one engine: one handler per endpoint of the OpenAI, Anthropic and
// Responses APIs (server/routes.cpp maps paths to them). Holds what they share.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_types.h"
#include "engine/engine.h"

namespace tern::api {

struct ServiceInfo {
  std::string model_name;            // what /v1/models lists and responses report
  std::vector<std::string> aliases;  // other names clients may use (store name, file stem)
  int64_t created = 0;               // unix time the server started
  // Temperature for requests that set none (tern serve --temp); unset: each API's default.
  std::optional<float> default_temperature;
};

class Service {
 public:
  Service(Engine& engine, ServiceInfo info) : engine_(engine), info_(std::move(info)) {}

  HttpResponse models(const HttpRequest& request);
  HttpResponse completions(const HttpRequest& request);
  HttpResponse health(const HttpRequest& request);
  HttpResponse metrics(const HttpRequest& request);

  // Whether an OpenAI request's "model" names the served model (case-insensitive; an empty
  // name means the served one). Anthropic requests map any name instead (clients send claude-*).
  bool serves_model(std::string_view name) const;
  // For an OpenAI-shaped request body: the 404 (another model) or 400 (not a string) its
  // "model" field earns, or nothing when the served model is meant.
  std::optional<HttpResponse> reject_model(const nlohmann::json& body) const;

  Engine& engine() { return engine_; }
  const ServiceInfo& info() const { return info_; }

 private:
  Engine& engine_;
  ServiceInfo info_;
};

}  // namespace tern::api
