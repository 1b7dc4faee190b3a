#include "server/chat_page.h"

#include <string_view>

#include "server/assets/chat_assets.h"

namespace tern::server {

void register_chat_page(HttpServer& server) {
  struct Asset {
    const char* path;
    std::string_view body;
    const char* content_type;
  };
  const Asset pages[] = {
      {"/", assets::kChatHtml, "text/html; charset=utf-8"},
      {"/chat.css", assets::kChatCss, "text/css; charset=utf-8"},
      {"/chat.js", assets::kChatJs, "text/javascript; charset=utf-8"},
  };
  for (const Asset& asset : pages) {
    server.route_public(asset.path, [asset](const api::HttpRequest&) {
      api::HttpResponse r;
      r.content_type = asset.content_type;
      r.body = std::string(asset.body);
      return r;
    });
  }
}

}  // namespace tern::server
