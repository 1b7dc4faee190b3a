#include "server/routes.h"

#include <memory>

#include "api/anthropic_messages.h"
#include "api/openai_chat.h"
#include "api/responses.h"
#include "server/chat_page.h"

namespace tern::server {

void register_routes(HttpServer& server, api::Service& service) {
  using api::ErrorFlavor;
  using api::HttpRequest;
  using api::HttpResponse;
  auto bind = [&service](HttpResponse (api::Service::*fn)(const HttpRequest&)) {
    return [&service, fn](const HttpRequest& r) { return (service.*fn)(r); };
  };
  // Responses kept for previous_response_id, as long as the routes live.
  auto responses = std::make_shared<api::ResponsesStore>(256);
  for (const std::string prefix : {"/v1", ""}) {
    server.route("GET", prefix + "/models", ErrorFlavor::OpenAI, bind(&api::Service::models));
    server.route("POST", prefix + "/completions", ErrorFlavor::OpenAI,
                 bind(&api::Service::completions));
    server.route("POST", prefix + "/chat/completions", ErrorFlavor::OpenAI,
                 [&service](const HttpRequest& r) { return api::chat_completions(service, r); });
    server.route("POST", prefix + "/messages", ErrorFlavor::Anthropic,
                 [&service](const HttpRequest& r) { return api::anthropic_messages(service, r); });
    server.route(
        "POST", prefix + "/messages/count_tokens", ErrorFlavor::Anthropic,
        [&service](const HttpRequest& r) { return api::anthropic_count_tokens(service, r); });
    server.route("POST", prefix + "/responses", ErrorFlavor::OpenAI,
                 [&service, responses](const HttpRequest& r) {
                   return api::responses_create(service, *responses, r);
                 });
    server.route("GET", prefix + R"(/responses/[A-Za-z0-9_\-]+)", ErrorFlavor::OpenAI,
                 [responses](const HttpRequest& r) { return api::responses_get(*responses, r); });
  }
  server.route("GET", "/health", ErrorFlavor::OpenAI, bind(&api::Service::health));
  register_chat_page(server);
  server.route("GET", "/metrics", ErrorFlavor::OpenAI, bind(&api::Service::metrics));
}

}  // namespace tern::server
