// The chat web page at / (and its /chat.css, /chat.js): plain files compiled into the binary from
// server/assets/. Served without an API key: the page holds no secrets; it asks for the key and
// sends it with each API call.
#pragma once

#include "server/http_server.h"

namespace tern::server {

void register_chat_page(HttpServer& server);

}  // namespace tern::server
