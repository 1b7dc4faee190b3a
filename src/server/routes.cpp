#include "server/routes.h"

#include "api/anthropic_messages.h"
#include "api/openai_chat.h"

namespace tern::server {

void register_routes(HttpServer& server, api::Service& service) {
  using api::ErrorFlavor;
  using api::HttpRequest;
  using api::HttpResponse;
  auto bind = [&service](HttpResponse (api::Service::*fn)(const HttpRequest&)) {
    return [&service, fn](const HttpRequest& r) { return (service.*fn)(r); };
  };
  for (const std::string prefix : {"/v1", ""}) {
    server.route("GET", prefix + "/models", ErrorFlavor::OpenAI, bind(&api::Service::models));
    server.route("POST", prefix + "/completions", ErrorFlavor::OpenAI,
                 bind(&api::Service::completions));
    server.route("POST", prefix + "/chat/completions", ErrorFlavor::OpenAI,
                 [&service](const HttpRequest& r) { return api::chat_completions(service, r); });
    server.route("POST", prefix + "/messages", ErrorFlavor::Anthropic,
                 [&service](const HttpRequest& r) { return api::anthropic_messages(service, r); });
    server.route("POST", prefix + "/messages/count_tokens", ErrorFlavor::Anthropic,
                 [&service](const HttpRequest& r) {
                   return api::anthropic_count_tokens(service, r);
                 });
  }
  server.route("GET", "/health", ErrorFlavor::OpenAI, bind(&api::Service::health));
  server.route("GET", "/metrics", ErrorFlavor::OpenAI, bind(&api::Service::metrics));
}

}  // namespace tern::server
