// Which path reaches which API handler. Clients differ on the /v1 prefix, so both forms answer.
#pragma once

#include "api/service.h"
#include "server/http_server.h"

namespace tern::server {

void register_routes(HttpServer& server, api::Service& service);

}  // namespace tern::server
